"""Delivery of a report where teams work: CI outputs (``ci``), the ``--html`` /
``--github-summary`` / ``--gitlab`` options (``delivery``), failure fingerprints (``fingerprint``)
and posting to GitHub issues and Slack (``send``)."""

from trainaudit.answer.fingerprint import cause_key, fingerprint, marker, signature

__all__ = ["cause_key", "fingerprint", "marker", "signature"]
