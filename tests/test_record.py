"""The public record: every shipped row names a registered workload, a catalog GPU, a known unit and a source it was
read from; together the rows span enough GPUs and model families to be worth plotting; a malformed row is refused
with its file and line.

    python -m pytest -q tests/test_record.py
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from devicebench.results.datasheets import catalog_entry
from devicebench.results.record import (
    COLUMNS,
    UNITS,
    PublishedFigure,
    RecordError,
    published_figures,
    read_record,
)
from devicebench.workloads import get_workload

FIGURES = published_figures()
FAMILIES = {"resnet50": "ResNet", "resnet152": "ResNet", "vgg16": "VGG", "gnmt": "GNMT"}  # bert-*, gpt2-*: by prefix
GOOD_ROW = {
    "workload": "resnet50",
    "gpu": "v100-sxm2",
    "gpus": "8",
    "framework": "PyTorch",
    "framework_version": "NGC 19.10",
    "precision": "amp-fp16",
    "tf32": "n/a",
    "batch_per_gpu": "256",
    "sequence_length": "",
    "throughput": "6888.75",
    "unit": "images/s",
    "data": "real",
    "source": "NVIDIA/DeepLearningExamples@3bbe228d38952b8b91caca4842a3e0b27ff99a93:PyTorch/README.md",
    "notes": "a note, with a comma",
}


def family(workload: str) -> str:
    """The model family a workload belongs to, as the record's coverage counts them."""
    for prefix, name in (("bert-", "BERT"), ("gpt2-", "GPT-2")):
        if workload.startswith(prefix):
            return name
    return FAMILIES[workload]


def write_record(folder: Path, rows: list[dict[str, str]], name: str = "source.csv") -> Path:
    """A record file in the real format: the header, then the rows, quoted as Python's csv module quotes."""
    folder.mkdir(parents=True, exist_ok=True)
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    (folder / name).write_text(text.getvalue(), encoding="utf-8")
    return folder / name


@pytest.mark.parametrize("workload", sorted({figure.workload for figure in FIGURES}))
def test_every_row_names_a_registered_workload(workload):
    assert get_workload(workload).name == workload


def test_every_row_names_a_catalog_gpu_a_unit_and_a_source():
    for figure in FIGURES:
        assert catalog_entry(figure.gpu).key == figure.gpu, figure.describe()
        assert figure.unit in UNITS and figure.source.strip(), figure.describe()
        assert figure.gpus >= 1 and figure.batch_per_gpu >= 1 and figure.throughput > 0, figure.describe()


def test_the_record_spans_enough_rows_gpus_and_model_families():
    assert len(FIGURES) >= 100
    assert len({figure.gpu for figure in FIGURES}) >= 10
    assert len({family(figure.workload) for figure in FIGURES}) >= 5


def test_a_text_model_row_gives_sequences_or_tokens_and_an_image_row_no_sequence_length():
    for figure in FIGURES:
        if family(figure.workload) in ("ResNet", "VGG"):
            assert figure.unit == "images/s" and figure.sequence_length is None, figure.describe()
        else:
            assert figure.unit in ("sequences/s", "tokens/s"), figure.describe()


def test_a_row_is_read_with_its_types_and_its_per_gpu_throughput(tmp_path):
    write_record(
        tmp_path,
        [
            GOOD_ROW,
            {
                **GOOD_ROW,
                "workload": "bert-large",
                "sequence_length": "384",
                "unit": "sequences/s",
                "throughput": "28",
                "gpus": "4",
            },
        ],
    )
    image, text = read_record(tmp_path)
    assert image == PublishedFigure(
        **{**GOOD_ROW, "gpus": 8, "batch_per_gpu": 256, "sequence_length": None, "throughput": 6888.75}
    )
    assert image.per_gpu_throughput == pytest.approx(861.09375)  # 6888.75 images/s over 8 GPUs
    assert text.sequence_length == 384 and text.per_gpu_throughput == 7.0  # 28 sequences/s over 4 GPUs
    assert image.describe() == (
        "resnet50 on 8x v100-sxm2, PyTorch NGC 19.10, amp-fp16, batch 256/GPU: 6888.75 images/s (real data)"
    )
    assert "seq 384" in text.describe() and "\n" not in text.describe()


def test_files_are_read_in_name_order_and_a_url_is_a_source(tmp_path):
    write_record(tmp_path, [{**GOOD_ROW, "throughput": "2"}], name="b.csv")
    write_record(tmp_path, [{**GOOD_ROW, "throughput": "1", "source": "https://example.org/benchmarks"}], name="a.csv")
    (tmp_path / "README.txt").write_text("not a record file")
    assert [figure.throughput for figure in read_record(tmp_path)] == [1.0, 2.0]


def test_published_figures_filters_by_workload():
    for workload in {figure.workload for figure in FIGURES}:
        chosen = published_figures(workload)
        assert chosen and all(figure.workload == workload for figure in chosen)
    assert sum(len(published_figures(workload)) for workload in {f.workload for f in FIGURES}) == len(FIGURES)
    assert published_figures("no-such-workload") == ()


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("precision", "fp16", "precision 'fp16' is not one of"),
        ("tf32", "yes", "tf32 'yes' is not one of"),
        ("unit", "img/s", "unit 'img/s' is not one of"),
        ("data", "imagenet", "data 'imagenet' is not one of"),
        ("framework", "pytorch", "framework 'pytorch' is not one of"),
        ("throughput", "0", "throughput '0' must be a finite number above 0"),
        ("throughput", "-3.5", "throughput '-3.5' must be a finite number above 0"),
        ("throughput", "nan", "throughput 'nan' must be a finite number above 0"),
        ("throughput", "inf", "throughput 'inf' must be a finite number above 0"),
        ("throughput", "893 img/s", "throughput '893 img/s' is not a number"),
        ("gpus", "0", "gpus 0 must be 1 or more"),
        ("gpus", "1.5", "gpus '1.5' is not an integer"),
        ("batch_per_gpu", "0", "batch_per_gpu 0 must be 1 or more"),
        ("sequence_length", "0", "sequence_length 0 must be 1 or more"),
        ("source", "", "source '' is neither"),
        ("source", "the NVIDIA README", "source 'the NVIDIA README' is neither"),
        ("workload", " ", "workload is empty"),
        ("gpu", "v100", "gpu: Unknown GPU 'v100'"),
        ("gpu", "V100 SXM2", "gpu 'V100 SXM2': write the catalog key 'v100-sxm2'"),
    ],
)
def test_a_malformed_row_is_refused_with_its_file_line_and_fault(tmp_path, column, value, message):
    write_record(tmp_path, [GOOD_ROW, GOOD_ROW, {**GOOD_ROW, column: value}], name="bad.csv")
    with pytest.raises(RecordError, match=r"^bad\.csv, line 4: ") as refused:
        read_record(tmp_path)
    assert message in str(refused.value)
    assert isinstance(refused.value, ValueError)  # callers that catch ValueError catch this too


def test_a_quoted_note_over_two_lines_counts_its_lines(tmp_path):
    write_record(tmp_path, [{**GOOD_ROW, "notes": "one\ntwo"}, {**GOOD_ROW, "unit": "img/s"}], name="bad.csv")
    with pytest.raises(RecordError, match=r"^bad\.csv, line 4: unit"):
        read_record(tmp_path)


def test_a_wrong_header_or_cell_count_is_refused(tmp_path):
    path = write_record(tmp_path, [GOOD_ROW], name="bad.csv")
    text = path.read_text()
    path.write_text(text.replace("batch_per_gpu", "batch"))
    with pytest.raises(RecordError, match=r"^bad\.csv, line 1: the header must be workload,gpu,"):
        read_record(tmp_path)
    path.write_text(text.rstrip("\n") + ",extra\n")
    with pytest.raises(RecordError, match=r"^bad\.csv, line 2: 15 cells, the header has 14"):
        read_record(tmp_path)
    path.write_text("")
    with pytest.raises(RecordError, match=r"^bad\.csv, line 1: the header must be .*; it is missing"):
        read_record(tmp_path)
