"""Checks the ELF files of a repaired manylinux wheel, for any architecture. They ask the
system for nothing the tag does not promise: no versioned glibc symbol newer than the tag's
glibc (GLIBC_2.N with N above it), no C++ runtime of the system's (GLIBCXX_, CXXABI_: libc++
is linked in), and no undefined symbol that neither a library in the wheel, nor a versioned
system library, nor the system's zlib (the policies' libz.so.1), nor (for the extension) the
Python interpreter provides: a function an old glibc lacks would otherwise load as
unresolved on the user's machine. And the extension, a
Release build, exports only the module's init (cpp/python/ext.map: our layers and the linked-in
C++ runtime stay local, so they cannot interpose on torch's copies) and carries no symbol table
or debug information (install.strip in pyproject.toml). Run with build/wheel-tools' Python
(pyelftools comes with auditwheel).

    python scripts/check_wheel_symbols.py WHEEL
"""

from __future__ import annotations

import io
import re
import sys
import zipfile
from pathlib import PurePosixPath

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection
from elftools.elf.gnuversions import GNUVerNeedSection, GNUVerSymSection

PYTHON_API = re.compile(r"^_?Py|^PyExc_")
# The manylinux policies take zlib from the system (libz.so.1), unversioned: its API, every
# function of which zlib 1.2.3 (older than any glibc 2.17 system's) already had.
ZLIB_API = re.compile(r"^(deflate|inflate|compress|uncompress|crc32|adler32|zlibVersion|zError|gz)")


def needed(elf: ELFFile) -> set[str]:
    dynamic = elf.get_section_by_name(".dynamic")
    return {tag.needed for tag in dynamic.iter_tags() if tag.entry.d_tag == "DT_NEEDED"} if dynamic else set()


def dynamic_symbols(elf: ELFFile) -> list[tuple[str, bool, bool, str | None]]:
    """(name, defined, weak, version needed) for each dynamic symbol."""
    dynsym = elf.get_section_by_name(".dynsym")
    if not isinstance(dynsym, SymbolTableSection):
        return []
    versym = next((s for s in elf.iter_sections() if isinstance(s, GNUVerSymSection)), None)
    verneed = next((s for s in elf.iter_sections() if isinstance(s, GNUVerNeedSection)), None)
    names: dict[int, str] = {}
    if verneed is not None:
        for _, auxiliaries in verneed.iter_versions():
            for aux in auxiliaries:
                names[aux["vna_other"]] = aux.name
    out = []
    for i, sym in enumerate(dynsym.iter_symbols()):
        if not sym.name:
            continue
        defined = sym["st_shndx"] != "SHN_UNDEF"
        weak = sym["st_info"]["bind"] == "STB_WEAK"
        version = None
        if versym is not None and not defined:
            index = versym.get_symbol(i)["ndx"]
            if isinstance(index, int):
                version = names.get(index & 0x7FFF)
        out.append((sym.name, defined, weak, version))
    return out


def main() -> int:
    (wheel,) = sys.argv[1:]
    tag = re.search(r"manylinux_2_(\d+)_", wheel)
    if not tag:
        raise SystemExit(f"check_wheel_symbols: {wheel} has no manylinux_2_N tag")
    glibc_minor = int(tag.group(1))
    with zipfile.ZipFile(wheel) as z:
        elfs = {n: z.read(n) for n in z.namelist() if re.search(r"\.so(\.|$)", PurePosixPath(n).name)}
    tables = {name: dynamic_symbols(ELFFile(io.BytesIO(data))) for name, data in elfs.items()}
    system_zlib = {name for name, data in elfs.items() if "libz.so.1" in needed(ELFFile(io.BytesIO(data)))}
    provided = {sym for table in tables.values() for sym, defined, _, _ in table if defined}
    problems = []
    for name, data in elfs.items():
        if not PurePosixPath(name).name.startswith("_ext."):
            continue
        exports = sorted({sym for sym, defined, _, _ in tables[name] if defined})
        if exports != ["PyInit__ext"]:
            problems.append(f"{name} exports more than PyInit__ext (cpp/python/ext.map): "
                            + ", ".join(s for s in exports if s != "PyInit__ext")[:400])
        sections = sorted({s.name for s in ELFFile(io.BytesIO(data)).iter_sections()
                           if s.name == ".symtab" or s.name.startswith((".debug_", ".zdebug_"))})
        if sections:
            problems.append(f"{name} is not stripped: it has {' '.join(sections)} (install.strip in pyproject.toml)")
    newest = 0
    for name, table in tables.items():
        is_extension = PurePosixPath(name).name.startswith("_ext.")
        for sym, defined, weak, version in table:
            if defined:
                continue
            if version and version.startswith("GLIBC_2."):
                minor = int(version.split(".")[1])
                newest = max(newest, minor)
                if minor > glibc_minor:
                    problems.append(f"{name}: {sym}@{version} (newer than the tag's glibc 2.{glibc_minor})")
            elif version and version.startswith(("GLIBCXX_", "CXXABI_", "GCC_")):
                problems.append(f"{name}: {sym}@{version} (the system's C++ runtime or libgcc)")
            elif (version is None and not weak and sym not in provided and not (is_extension and PYTHON_API.match(sym))
                  and not (name in system_zlib and ZLIB_API.match(sym))):
                problems.append(f"{name}: {sym} (undefined, unversioned, and no library in the wheel defines it)")
    if problems:
        print(f"check_wheel_symbols: {PurePosixPath(wheel).name}:", file=sys.stderr)
        for line in problems[:40]:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(f"check_wheel_symbols: {len(tables)} ELF files; newest glibc symbol version GLIBC_2.{newest}"
          f" (tag: 2.{glibc_minor}); every other undefined symbol is the wheel's own, zlib's or Python's;"
          " the extension exports only PyInit__ext and is stripped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
