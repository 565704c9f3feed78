"""Prices from a flag or a TOML file, and the refusals that say how to write them."""

from __future__ import annotations

import pytest

from devicebench.results.prices import PriceError, parse_prices

LAPTOP = {"machine_id": "aaaa1111", "machine_name": "laptop"}
SERVER = {"machine_id": "bbbb2222", "machine_name": "server"}


def test_flag_prices_by_kind_and_by_device():
    prices = parse_prices("cpu=0.10, cuda=2.50,cuda:1=4")
    assert prices.per_hour(LAPTOP, "cpu") == 0.10
    assert prices.per_hour(LAPTOP, "cuda:0") == 2.50
    assert prices.per_hour(LAPTOP, "cuda:1") == 4.0
    assert prices.per_hour(LAPTOP, "mps") is None


def test_toml_prices_per_machine_fall_back_to_the_default(tmp_path):
    path = tmp_path / "prices.toml"
    path.write_text(
        "[default]\ncpu = 0.10\ncuda = 2.50\n\n[machine.laptop]\ncpu = 0.0\n\n[machine.bbbb2222]\ncuda = 1.5\n"
    )
    prices = parse_prices(str(path))
    assert prices.per_hour(LAPTOP, "cpu") == 0.0  # by machine name
    assert prices.per_hour(LAPTOP, "cuda:0") == 2.50  # the default
    assert prices.per_hour(SERVER, "cuda:0") == 1.5  # by machine id


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cpu", "is not DEVICE=PRICE"),
        ("gpu=1", "unknown device 'gpu'"),
        ("cpu=cheap", "must be a number"),
        ("cpu=-1", "zero or more"),
        ("cpu=nan", "zero or more"),
        ("missing.toml", "does not exist"),
    ],
)
def test_bad_prices_are_refused_with_how_to_write_them(text, message):
    with pytest.raises(PriceError, match=message):
        parse_prices(text)


def test_bad_toml_is_refused(tmp_path):
    broken = tmp_path / "broken.toml"
    broken.write_text("[default\ncpu = 1")
    with pytest.raises(PriceError, match="not valid TOML"):
        parse_prices(str(broken))
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("[prices]\ncpu = 1\n")
    with pytest.raises(PriceError, match="unknown section"):
        parse_prices(str(unknown))
