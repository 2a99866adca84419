"""Skip markers for tests that need an instruction set this machine may lack.

``needs_avx512(why)`` / ``needs_vnni(why)`` skip when ``Target("llvm")`` (the host) lacks
``avx512f`` / ``avx512vnni``; the skip reason names the missing ISA and ``why``."""
import pytest

from ember.target import Target


def _needs(feature: str, why: str):
    return pytest.mark.skipif(feature not in Target("llvm").features,
                              reason=f"this machine has no {feature}: {why}")


def needs_avx512(why: str):
    return _needs("avx512f", why)


def needs_vnni(why: str):
    return _needs("avx512vnni", why)
