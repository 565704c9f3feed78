"""The GPU catalog `devicebench estimate --on` reads: every entry sourced, keyed and in plausible units, a few
figures spelled out against their documents, and the keys a user types parsed or refused with what to write.

    python -m pytest -q tests/test_datasheets.py
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from devicebench.results.datasheets import (
    DATASHEETS,
    UnknownTarget,
    catalog_entry,
    datasheet_for,
    parse_targets,
)

KEYS = (
    "t4",
    "v100-sxm2",
    "v100-pcie",
    "a10g",
    "a10",
    "l4",
    "l40s",
    "a100-40gb",
    "a100-40gb-pcie",
    "a100-80gb",
    "a100-80gb-pcie",
    "h100-pcie",
    "h100-sxm",
    "h200",
    "rtx-3090",
    "rtx-4090",
    "gtx-860m",
    "k80",
    "p100-pcie",
    "p100-sxm2",
    "titan-xp",
    "titan-v",
    "titan-rtx",
    "rtx-2080-ti",
    "quadro-rtx-8000",
    "rtx-a6000",
    "rtx-a5000",
    "rtx-a4000",
    "a40",
    "rtx-3080",
    "rtx-6000-ada",
)
DOCUMENT_WORDS = ("datasheet", "whitepaper", "documentation", "specifications", "baseten")  # what a source names
PCIE_X16_GB_S = {15.75, 31.5, 63.0}  # PCIe 3.0, 4.0 and 5.0, one direction


def test_the_catalog_has_every_key_a_user_may_type():
    assert set(KEYS) <= {datasheet.key for datasheet in DATASHEETS}


@pytest.mark.parametrize("datasheet", DATASHEETS, ids=lambda datasheet: datasheet.key)
def test_each_entry_names_its_document_and_a_typable_key(datasheet):
    assert datasheet.source.strip() and any(word in datasheet.source.lower() for word in DOCUMENT_WORDS)
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", datasheet.key)


def test_keys_and_products_are_unique():
    assert len({datasheet.key for datasheet in DATASHEETS}) == len(DATASHEETS)
    assert len({datasheet.product.lower() for datasheet in DATASHEETS}) == len(DATASHEETS)


@pytest.mark.parametrize("datasheet", DATASHEETS, ids=lambda datasheet: datasheet.key)
def test_each_figure_is_in_plausible_units(datasheet):
    if datasheet.fp32_tflops is not None:  # None only where no document gives it (the A10G)
        assert 0.5 <= datasheet.fp32_tflops <= 200  # TFLOP/s, not GFLOP/s
        for tensor in (datasheet.tf32_tflops, datasheet.bf16_tflops):
            assert tensor is None or datasheet.fp32_tflops * 0.9 <= tensor <= 2500  # dense, not with sparsity
    assert 50 <= datasheet.memory_gb_s <= 10_000  # GB/s, not TB/s
    assert 1 <= datasheet.memory_gib <= 200  # GiB, not bytes or MiB
    assert datasheet.host_link_gb_s in PCIE_X16_GB_S
    assert 2010 <= datasheet.year <= 2026


@pytest.mark.parametrize("datasheet", DATASHEETS, ids=lambda datasheet: datasheet.key)
def test_each_entry_is_consistent_with_itself(datasheet):
    tensor = {"tf32": datasheet.tf32_tflops, "bf16": datasheet.bf16_tflops}
    if datasheet.fp32_tflops is None:  # a GPU whose compute no document gives has no tensor figures either
        assert tensor == {"tf32": None, "bf16": None}
    if None not in tensor.values():
        # every tensor core here runs bf16 at twice its TF32 rate: 1x or 4x is a sparse figure beside a dense one
        assert tensor["tf32"] < tensor["bf16"] == pytest.approx(2 * tensor["tf32"], rel=0.03)
    assert datasheet.host_link_gb_s < datasheet.memory_gb_s  # PCIe is never faster than the GPU's own memory
    for name in datasheet.device_names:  # no other entry claims the name first (datasheet_for takes the first match)
        assert datasheet_for(name) is datasheet


@pytest.mark.parametrize(
    "device_name, key",
    [
        ("Tesla K80", "k80"),
        ("TITAN Xp", "titan-xp"),  # older drivers leave out "NVIDIA"
        ("NVIDIA TITAN V", "titan-v"),
        ("Tesla P100-PCIE-16GB", "p100-pcie"),
        ("Tesla P100-PCIE-12GB", None),  # 549 GB/s, not the 16 GB card's 732
        ("Tesla P100-SXM2-16GB", "p100-sxm2"),
        ("Quadro RTX 8000", "quadro-rtx-8000"),
        ("Quadro RTX 6000", None),
        ("NVIDIA RTX A6000", "rtx-a6000"),
        ("NVIDIA A40", "a40"),
        ("NVIDIA A10", "a10"),  # the A40 and A4000 do not take the A10's name, nor it theirs
        ("NVIDIA GeForce RTX 3080", "rtx-3080"),
        ("NVIDIA GeForce RTX 3080 Ti", None),
        ("NVIDIA GeForce RTX 3080 Laptop GPU", None),
        ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"),
        ("NVIDIA RTX 4000 Ada Generation", None),
    ],
)
def test_new_gpus_are_found_by_their_torch_names_and_only_by_them(device_name, key):
    found = datasheet_for(device_name)
    assert (found.key if found else None) == key


def test_known_figures_match_their_documents():
    h100 = catalog_entry("h100-sxm")
    assert (h100.fp32_tflops, h100.tf32_tflops, h100.bf16_tflops, h100.memory_gb_s) == (67.0, 494.7, 989.4, 3350.0)
    assert (h100.memory_gib, h100.host_link_gb_s, h100.year) == (80, 63.0, 2022)
    t4 = catalog_entry("t4")
    assert (t4.fp32_tflops, t4.tf32_tflops, t4.bf16_tflops, t4.memory_gb_s) == (8.1, None, None, 320.0)
    assert (t4.memory_gib, t4.host_link_gb_s) == (16, 15.75)
    assert catalog_entry("a100-80gb").memory_gb_s == 2039.0
    l40s = catalog_entry("l40s")  # the datasheet's 366 and 733 are with sparsity
    assert (l40s.fp32_tflops, l40s.tf32_tflops, l40s.bf16_tflops, l40s.memory_gb_s) == (91.6, 183.0, 362.05, 864.0)
    laptop = catalog_entry("gtx-860m")  # Maxwell: 640 cores x 2 x 1029 MHz base clock; no tensor cores
    assert laptop.fp32_tflops == pytest.approx(640 * 2 * 1.029e9 / 1e12, abs=1e-3)
    assert (laptop.tf32_tflops, laptop.bf16_tflops, laptop.memory_gb_s, laptop.memory_gib) == (None, None, 80.0, 2)
    a10g = catalog_entry("a10g")  # no document names its compute peaks: None rather than the A10's
    assert (a10g.fp32_tflops, a10g.tf32_tflops, a10g.bf16_tflops, a10g.memory_gb_s) == (None, None, None, 600.0)
    k80 = catalog_entry("k80")  # one GPU of the board: half its 8.73 TFLOP/s, 480 GB/s and 24 GB
    assert (k80.fp32_tflops, k80.memory_gb_s, k80.memory_gib) == (pytest.approx(4.365), 240.0, 12)
    a40 = catalog_entry("a40")  # the datasheet's 149.6 (TF32) and 299.4 (BF16) are with sparsity
    assert (a40.fp32_tflops, a40.tf32_tflops, a40.bf16_tflops, a40.memory_gb_s) == (37.4, 74.8, 149.7, 696.0)
    rtx_3080 = catalog_entry("rtx-3080")  # GeForce: TF32 at the fp32 rate, half the professional cards' ratio
    assert (rtx_3080.fp32_tflops, rtx_3080.tf32_tflops, rtx_3080.bf16_tflops, rtx_3080.memory_gb_s) == (
        29.8,
        29.8,
        59.5,
        760.0,
    )
    ada = catalog_entry("rtx-6000-ada")  # the datasheet's 1,457 is FP8 with sparsity; these are the whitepaper's
    assert (ada.fp32_tflops, ada.tf32_tflops, ada.bf16_tflops, ada.memory_gb_s) == (91.1, 182.1, 364.2, 960.0)
    titan_v = catalog_entry("titan-v")  # 5120 cores x 2 x 1.455 GHz boost, not NVIDIA's 13.8 at a lower clock
    assert titan_v.fp32_tflops == pytest.approx(5120 * 2 * 1.455e9 / 1e12, abs=0.05)
    assert (titan_v.tf32_tflops, titan_v.bf16_tflops) == (None, None)  # Volta: FP16 tensor cores only


@pytest.mark.parametrize(
    "typed, key",
    [
        ("h100-sxm", "h100-sxm"),
        ("  H100-SXM ", "h100-sxm"),  # any case, spaces trimmed
        ("H100 SXM", "h100-sxm"),  # the product name
        ("geforce rtx 3090", "rtx-3090"),
        ("A100 80GB PCIe", "a100-80gb-pcie"),
    ],
)
def test_catalog_entry_takes_keys_and_product_names(typed, key):
    assert catalog_entry(typed).key == key


def test_an_unknown_key_is_refused_with_the_closest_and_every_key():
    with pytest.raises(UnknownTarget) as refused:
        catalog_entry("a100-80")
    message = str(refused.value)
    assert "'a100-80'" in message and "Did you mean 'a100-80gb'?" in message
    assert all(key in message for key in KEYS)
    with pytest.raises(ValueError, match="Unknown GPU 'tpu-v5'") as refused:
        catalog_entry("tpu-v5")
    assert "Did you mean" not in str(refused.value)  # nothing close: no suggestion


def test_parse_targets_reads_a_comma_list_in_the_order_typed():
    assert [datasheet.key for datasheet in parse_targets("t4, A100-80GB,h100 sxm")] == ["t4", "a100-80gb", "h100-sxm"]


def test_all_is_the_whole_catalog_in_its_order():
    assert parse_targets("all") == list(DATASHEETS) == parse_targets(" ALL ")


@pytest.mark.parametrize("text", ["t4,l4,t4", "h100-sxm,H100 SXM"])
def test_a_gpu_named_twice_is_refused(text):
    with pytest.raises(ValueError, match="named twice"):
        parse_targets(text)


@pytest.mark.parametrize("text", ["", "  ", ",", " , "])
def test_an_empty_list_is_refused_with_what_to_write(text):
    with pytest.raises(ValueError, match="--on t4,a100-80gb"):
        parse_targets(text)


def test_an_empty_name_between_commas_is_refused():
    with pytest.raises(ValueError, match="empty GPU name"):
        parse_targets("t4,,l4")


def test_an_unknown_key_in_a_list_is_refused_with_a_suggestion():
    with pytest.raises(UnknownTarget, match="Did you mean 'rtx-4090'"):
        parse_targets("t4,rtx4090")


def test_the_catalog_imports_no_torch():
    code = "import sys, devicebench.results.datasheets; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
