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

import math
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devicebench.errors import DevicebenchError
from devicebench.files import UnusableFile, require_regular_file

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

_DEVICE_NAME = re.compile(r"^(cpu|cuda|mps|xpu)(:\d+)?$")


class PriceError(DevicebenchError, ValueError):
    """A price list that cannot be read; the message says where and how to write it."""


@dataclass(frozen=True)
class Prices:
    default: Mapping[str, float]  # device or device kind → price per hour
    machines: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # machine name or id → the same

    def per_hour(self, machine: Mapping[str, Any], device: str) -> float | None:
        """The hourly price of `device` on `machine`: the machine's own entry first, then the default."""
        kind = device.split(":")[0]
        for table in (
            self.machines.get(machine.get("machine_name", "")),
            self.machines.get(machine["machine_id"]),
            self.default,
        ):
            if table:
                for key in (device, kind):
                    if key in table:
                        return table[key]
        return None


def parse_prices(text: str) -> Prices:
    """`cpu=0.10,cuda=2.50` or the path of a TOML file (see the module docstring)."""
    path = Path(text)
    kind = _existing_kind(path) if text.strip() else None  # Path('') is the current folder, not what '' means
    if kind == "folder":
        raise PriceError(
            f"--price {text!r} is a folder; give DEVICE=PRICE pairs such as cpu=0.10,cuda=2.50, or a "
            "TOML file of prices"
        )
    if text.endswith(".toml") or kind in ("file", "other"):  # "other": a FIFO or a device, refused by name
        return _read_toml(path)
    where = f"--price {text!r}"
    return Prices(default=_parse_table(_pairs(text, where, "cpu=0.10,cuda=2.50"), where))


def parse_named_prices(text: str, known: Sequence[str]) -> dict[str, float]:
    """`t4=0.35,h100-sxm=2.50`: a price per hour for each of the `known` names (the GPUs `estimate` knows)."""
    where = f"--price {text!r}"
    return _parse_table(_pairs(text, where, f"{known[0]}=0.35"), where, known)


def _pairs(text: str, where: str, example: str) -> dict[str, str]:
    items = text.split(",")
    if not any(item.strip() for item in items):
        raise PriceError(f"{where} names no prices; write e.g. --price {example}")
    if not all(item.strip() for item in items):  # 'cpu=1,,cuda=2': a price left out, not a spare comma
        raise PriceError(
            f"{where} has an empty item; separate DEVICE=PRICE pairs by single commas, e.g. --price {example}"
        )
    pairs = [_pair(item, where) for item in items]
    names = [name for name, _ in pairs]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise PriceError(f"{where} prices {', '.join(repeated)} more than once; give each device one price")
    return dict(pairs)


def _existing_kind(path: Path) -> str | None:
    """ "folder", "file", "other" (a FIFO, a device, a socket), or None: nothing there, or a name the system will
    not look up (one too long, say)."""
    try:
        return "folder" if path.is_dir() else "file" if path.is_file() else "other" if path.exists() else None
    except OSError:
        return None


def _pair(item: str, where: str) -> tuple[str, str]:
    name, equals, value = item.partition("=")
    if not equals or not name.strip():
        raise PriceError(f"{where}: {item.strip()!r} is not DEVICE=PRICE; write e.g. cpu=0.10,cuda=2.50")
    return name.strip().lower(), value.strip()


def _parse_table(table: object, where: str, known: Sequence[str] | None = None) -> dict[str, float]:
    """DEVICE = PRICE pairs, the devices checked against `known` names, else against the device kinds."""
    if not isinstance(table, Mapping):
        raise PriceError(f"{where} is not a table of DEVICE = PRICE lines")
    prices = {}
    for device, value in table.items():
        if known is not None and str(device) not in known:
            raise PriceError(f"{where}: unknown device {device!r}; prices are for {', '.join(known)}")
        if known is None and not _DEVICE_NAME.match(str(device)):
            raise PriceError(f"{where}: unknown device {device!r}; prices are for cpu, cuda, cuda:N, mps or xpu")
        try:
            if isinstance(value, bool):  # TOML's true would otherwise be a price of 1
                raise TypeError(value)
            price = float(value)
        except (TypeError, ValueError):
            raise PriceError(f"{where}: the price of {device} must be a number per hour, got {value!r}") from None
        if not 0 <= price < math.inf:  # also refuses NaN
            raise PriceError(f"{where}: the price of {device} must be a finite number, zero or more, got {value!r}")
        prices[str(device)] = price
    return prices


def _read_toml(path: Path) -> Prices:
    try:
        require_regular_file(path, "the price file")  # a FIFO or a device would hang the read, or never end it
        data = tomllib.loads(path.read_text())
    except UnusableFile as error:
        raise PriceError(str(error)) from None
    except RecursionError:  # tomllib parses nested arrays and tables by recursion
        raise PriceError(
            f"price file {path} is nested too deeply to read; prices are flat DEVICE = PRICE lines "
            "under [default] and [machine.NAME]"
        ) from None
    except FileNotFoundError:
        raise PriceError(
            f"price file {path} does not exist; check the path, or give prices such as --price cpu=0.10,cuda=2.50"
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise PriceError(f"cannot read price file {path} ({error}); give a readable TOML file") from None
    except tomllib.TOMLDecodeError as error:
        raise PriceError(f"price file {path} is not valid TOML: {error}") from None
    unknown = set(data) - {"default", "machine"}
    if unknown:
        raise PriceError(
            f"price file {path}: unknown section(s) {', '.join(sorted(unknown))}; use [default] and [machine.NAME]"
        )
    machine_tables = data.get("machine", {})
    if not isinstance(machine_tables, Mapping):
        raise PriceError(f"price file {path}: machine is not a table; write [machine.NAME] sections")
    machines = {name: _parse_table(table, f"{path} [machine.{name}]") for name, table in machine_tables.items()}
    return Prices(default=_parse_table(data.get("default", {}), f"{path} [default]"), machines=machines)
