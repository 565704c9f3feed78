"""The errors of a fake nvidia-ml-py, shared by the tests that stand one in for NVML (monitor, check)."""

from __future__ import annotations


class FakeNvmlError(Exception):
    """nvidia-ml-py's NVMLError: str() is NVML's own text for the code."""

    text = "Unknown Error"

    def __str__(self) -> str:
        return self.text


class FakeNotSupported(FakeNvmlError):
    text = "Not Supported"


class FakeNotFound(FakeNvmlError):
    text = "Not Found"
