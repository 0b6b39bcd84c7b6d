"""Metric roles (which series is "the training loss") and robust, vectorized series statistics."""

from trainaudit.series.roles import ROLES, Roles, find_roles
from trainaudit.series.stats import (
    change_point,
    downsample,
    first_sustained,
    mad,
    robust_z,
    rolling_median,
    trailing_median_mad,
    trend_slope,
)

__all__ = [
    "ROLES",
    "Roles",
    "change_point",
    "downsample",
    "find_roles",
    "first_sustained",
    "mad",
    "robust_z",
    "rolling_median",
    "trailing_median_mad",
    "trend_slope",
]
