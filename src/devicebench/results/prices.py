"""What an hour on each device costs, so that times become money: S5's "cost per job, not per hour, decides".

Prices come from a flag, `--price cpu=0.10,cuda=2.50` (per hour, by device kind or by device such as `cuda:1`),
or from a TOML file for several machines:

    [default]            # per hour, in whatever currency you like
    cpu = 0.10
    cuda = 2.50

    [machine.laptop]     # by machine name ($DEVICEBENCH_MACHINE or hostname) or machine id
    cpu = 0.0

    python -c "from devicebench.results.prices import parse_prices; print(parse_prices('cpu=0.1,cuda=2.5'))"
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

_DEVICE_NAME = re.compile(r"^(cpu|cuda|mps|xpu)(:\d+)?$")


class PriceError(ValueError):
    """A price list that cannot be read; the message says where and how to write it."""


@dataclass(frozen=True)
class Prices:
    default: Mapping[str, float]  # device or device kind → price per hour
    machines: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # machine name or id → the same

    def per_hour(self, machine: Mapping[str, Any], device: str) -> float | None:
        """The hourly price of `device` on `machine`: the machine's own entry first, then the default."""
        kind = device.split(":")[0]
        for table in (self.machines.get(machine.get("machine_name", "")), self.machines.get(machine["machine_id"]),
                      self.default):
            if table:
                for key in (device, kind):
                    if key in table:
                        return table[key]
        return None


def parse_prices(text: str) -> Prices:
    """`cpu=0.10,cuda=2.50` or the path of a TOML file (see the module docstring)."""
    if text.endswith(".toml") or Path(text).is_file():
        return _read_toml(Path(text))
    return Prices(default=_parse_table(dict(_pair(item, text) for item in text.split(",") if item.strip()), text))


def _pair(item: str, whole: str) -> tuple[str, str]:
    name, equals, value = item.partition("=")
    if not equals:
        raise PriceError(f"--price {whole!r}: {item.strip()!r} is not DEVICE=PRICE; write e.g. cpu=0.10,cuda=2.50")
    return name.strip().lower(), value.strip()


def _parse_table(table: Mapping[str, Any], where: str) -> dict[str, float]:
    prices = {}
    for device, value in table.items():
        if not _DEVICE_NAME.match(str(device)):
            raise PriceError(f"{where}: unknown device {device!r}; prices are for cpu, cuda, cuda:N, mps or xpu")
        try:
            price = float(value)
        except (TypeError, ValueError):
            raise PriceError(f"{where}: the price of {device} must be a number per hour, got {value!r}") from None
        if not price >= 0:  # also refuses NaN
            raise PriceError(f"{where}: the price of {device} must be zero or more, got {value!r}")
        prices[str(device)] = price
    return prices


def _read_toml(path: Path) -> Prices:
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise PriceError(f"price file {path} does not exist") from None
    except tomllib.TOMLDecodeError as error:
        raise PriceError(f"price file {path} is not valid TOML: {error}") from None
    unknown = set(data) - {"default", "machine"}
    if unknown:
        raise PriceError(f"price file {path}: unknown section(s) {', '.join(sorted(unknown))}; use [default] and "
                         "[machine.NAME]")
    machines = {name: _parse_table(table, f"{path} [machine.{name}]") for name, table in data.get("machine", {}).items()}
    return Prices(default=_parse_table(data.get("default", {}), f"{path} [default]"), machines=machines)
