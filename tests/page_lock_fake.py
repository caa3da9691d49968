"""A stand-in for the CUDA runtime's cudaHostRegister / cudaHostUnregister: two C-callable
functions (ctypes) that record what the engine locks, so the page-locking mechanism is
tested on machines without a GPU. Only the CUDA calls themselves are left to the GPU test."""

from __future__ import annotations

import ctypes
import threading

_REGISTER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint)
_UNREGISTER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)

# The engine keeps raw function pointers until its last batch buffer is freed, which a failing
# test may delay past its end: every fake stays alive for the whole session.
_KEEP_ALIVE: list = []


class FakeCudart:
    def __init__(self) -> None:
        self.live: dict[int, int] = {}  # address -> locked bytes
        self.flags: set[int] = set()
        self.registers = 0
        self.unregisters = 0
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._register = _REGISTER(self._on_register)
        self._unregister = _UNREGISTER(self._on_unregister)
        _KEEP_ALIVE.append(self)

    @property
    def functions(self) -> tuple[int, int]:
        return (ctypes.cast(self._register, ctypes.c_void_p).value,
                ctypes.cast(self._unregister, ctypes.c_void_p).value)

    def _on_register(self, ptr, size, flags) -> int:
        with self._lock:
            self.registers += 1
            if ptr in self.live:
                self.errors.append(f"{ptr:#x} locked twice")
            self.live[ptr] = size
            self.flags.add(flags)
        return 0

    def _on_unregister(self, ptr) -> int:
        with self._lock:
            self.unregisters += 1
            if self.live.pop(ptr, None) is None:
                self.errors.append(f"{ptr:#x} unlocked but never locked")
        return 0

    def locked_bytes(self) -> int:
        with self._lock:
            return sum(self.live.values())
