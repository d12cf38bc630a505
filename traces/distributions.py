"""Seeded arrival processes and length distributions for synthetic workloads.

Arrivals: a renewal process whose gaps are Gamma(shape = 1/cv^2, mean = 1/rate), so
cv = 1 is Poisson and cv > 1 is burstier. Lengths: fixed, uniform, lognormal (set by
its mean), or resampled from observed values (e.g. a loaded trace's prompt lengths).
All draws take a numpy Generator so one seed fixes a whole workload.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from traces.tokens import IntArray


def rng_for(seed: int, stream: str) -> np.random.Generator:
    """Independent generator per (seed, stream name), so adding draws elsewhere
    never shifts this stream."""
    tag = int.from_bytes(stream.encode()[:8].ljust(8, b"\0"), "little")
    return np.random.Generator(np.random.PCG64([seed, tag, len(stream)]))


def gamma_arrivals(
    num_requests: int, rate: float, cv: float = 1.0, *, rng: np.random.Generator
) -> npt.NDArray[np.float64]:
    """Arrival times (first at 0) with mean gap 1/rate and gap CV `cv` (1 = Poisson).

    Raises:
        ValueError: rate or cv not positive and finite, or num_requests < 0.
    """
    if num_requests < 0 or not (0 < rate < math.inf) or not (0 < cv < math.inf):
        raise ValueError(f"need num_requests >= 0, rate > 0, cv > 0 (got {num_requests}, "
                         f"{rate}, {cv})")
    if num_requests == 0:
        return np.zeros(0)
    gaps = gamma_gaps(num_requests - 1, rate, 1.0 / (cv * cv), rng=rng)
    return np.concatenate([[0.0], np.cumsum(gaps)])


def gamma_gaps(
    count: int, rate: float, shape: float, *, rng: np.random.Generator
) -> npt.NDArray[np.float64]:
    """`count` inter-arrival gaps ~ Gamma(shape, scale = 1 / (rate * shape)): mean 1/rate,
    coefficient of variation 1/sqrt(shape) (shape 1 is Poisson; vLLM calls it burstiness)."""
    return np.asarray(rng.gamma(shape, 1.0 / (rate * shape), size=count), dtype=np.float64)


def poisson_arrivals(
    num_requests: int, rate: float, *, rng: np.random.Generator
) -> npt.NDArray[np.float64]:
    """Poisson arrivals (exponential gaps, mean 1/rate), first at time 0."""
    return gamma_arrivals(num_requests, rate, 1.0, rng=rng)


@dataclass(frozen=True, slots=True)
class LengthDist:
    """A token-length distribution; samples are ints clipped to [low, high].

    kind "fixed": always `mean`. "uniform": integers in [low, high]. "lognormal": mean
    `mean`, log-space sigma `sigma`. "empirical": resample `values` with replacement.
    """

    kind: str
    mean: float = 0.0
    sigma: float = 1.0
    low: int = 1
    high: int = 1 << 30
    values: tuple[int, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        if self.kind not in ("fixed", "uniform", "lognormal", "empirical"):
            raise ValueError(f"unknown length distribution {self.kind!r}")
        if self.low < 1 or self.high < self.low:
            raise ValueError(f"need 1 <= low <= high, got {self.low}, {self.high}")
        if self.kind in ("fixed", "lognormal") and not self.mean >= 1:
            raise ValueError(f"{self.kind} length needs mean >= 1, got {self.mean}")
        if self.kind == "lognormal" and not self.sigma >= 0:
            raise ValueError(f"lognormal sigma must be >= 0, got {self.sigma}")
        if self.kind == "empirical" and (not self.values or min(self.values) < 1):
            raise ValueError("empirical lengths need a non-empty set of values >= 1")

    def sample(self, size: int, rng: np.random.Generator) -> IntArray:
        """Draw `size` lengths."""
        if self.kind == "fixed":
            out = np.full(size, round(self.mean), dtype=np.int64)
        elif self.kind == "uniform":
            out = rng.integers(self.low, self.high, size=size, endpoint=True)
        elif self.kind == "lognormal":
            mu = math.log(self.mean) - self.sigma * self.sigma / 2
            out = np.rint(rng.lognormal(mu, self.sigma, size=size)).astype(np.int64)
        else:
            out = rng.choice(np.asarray(self.values, dtype=np.int64), size=size)
        return np.clip(out, self.low, self.high).astype(np.int64)


def fixed(value: int) -> LengthDist:
    """Every request gets `value` tokens."""
    return LengthDist("fixed", mean=value)


def uniform(low: int, high: int) -> LengthDist:
    """Integers uniform on [low, high]."""
    return LengthDist("uniform", low=low, high=high)


def lognormal(mean: float, sigma: float = 1.0, high: int = 1 << 30) -> LengthDist:
    """Lognormal with the given mean (before rounding and clipping) and log-sigma."""
    return LengthDist("lognormal", mean=mean, sigma=sigma, high=high)


def resampled(values: npt.ArrayLike) -> LengthDist:
    """Resample observed lengths (e.g. `trace.prompt_lens`) with replacement."""
    vals = np.asarray(values, dtype=np.int64).ravel()
    return LengthDist("empirical", values=tuple(int(v) for v in vals))
