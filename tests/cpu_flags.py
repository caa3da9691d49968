"""The kernel's view of the CPU and the debug report's, for the tests and the wheel checks."""

from __future__ import annotations


def proc_cpu_flags() -> set[str]:
    """The kernel's flags for the first CPU: x86's "flags", ARM's "Features" (empty where
    /proc/cpuinfo has neither)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((set(line.split(":", 1)[1].split()) for line in f
                         if line.startswith(("flags", "Features"))), set())
    except OSError:
        return set()


def cpu_paths_row(debug_report: str) -> str | None:
    """The `cpu paths` row of print_debug_info()'s output, or None where it has none."""
    return next((line.split(":", 1)[1].strip() for line in debug_report.splitlines()
                 if line.strip().startswith("cpu paths")), None)
