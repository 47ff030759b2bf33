"""DAPO's overlong reward shaping (Yu et al. 2025, "soft overlong punishment", eq. 13).

A response of length L under a limit L_max gets the length term

    0                                  if L <= L_max - L_cache
    ((L_max - L_cache) - L) / L_cache  if L_max - L_cache < L <= L_max

times a factor, added to its verifiable reward; it reaches -factor at the limit (a truncated
response). This is verl's `DAPORewardManager` form (`overlong_buffer.len`, `penalty_factor`), the
one RLEP ran with (512-token cache under a 3 072-token limit, factor 1.0). L counts every response
token, EOS included, as verl's `valid_response_length` does.
"""

from __future__ import annotations


def overlong_penalty(length: int, max_length: int, cache: int, factor: float = 1.0) -> float:
    """The (non-positive) length term of a response of `length` tokens; 0 when `cache` is 0."""
    if cache <= 0:
        return 0.0
    if not 0 < cache < max_length:
        raise ValueError(f"overlong cache {cache} must be in (0, max_length={max_length})")
    exceed = length - (max_length - cache)
    return min(0.0, -exceed / cache * factor)
