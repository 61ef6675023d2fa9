"""The one description of the machine a benchmark figure was measured on. Linux's
`/proc/cpuinfo` names the CPU; elsewhere `platform` does."""
import os
import platform


def _cpuinfo_field(name: str):
    """The first `name : value` line's value in /proc/cpuinfo, or None (no such file or line)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.split(":", 1)[0].strip() == name:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    """The CPU's model name (e.g. `AMD EPYC 7B13`), else the processor or architecture name."""
    return _cpuinfo_field("model name") or platform.processor() or platform.machine()


def cpu_flags() -> str:
    """The CPU's bf16-relevant features as `; avx2, avx512f, ...` (empty when none or unknown):
    bf16 autocast runs native kernels with `avx512_bf16`/`amx_bf16` and is emulated without."""
    flags = (_cpuinfo_field("flags") or "").split()
    have = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return "; " + ", ".join(have) if have else ""


def gpu_name(torch):
    """The first CUDA device's name, or None when torch sees no GPU."""
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def summary() -> str:
    """The machine line every BENCHMARKS section uses: `N cores (CPU model; bf16 flags)`, N the
    logical cores (os.cpu_count)."""
    return f"{os.cpu_count()} cores ({cpu_model()}{cpu_flags()})"
