"""``trainaudit audit``: the whole CI-failure investigation.

    answer, plots, info = run_audit(AuditOptions(inputs=["failing/"], passing=["passing/"],
                                                 repo="megatron", good="v1", bad="HEAD"))

Stages (each optional, the audit does what the inputs allow): fetch remote artifacts, stage and
classify local ones (``inputs``), find the test case, golden values and model config in the repo at
``--bad`` (``discover``), compare (golden gate or run vs run), diagnose each run, trace the git
history, and combine everything into one verdict (``combine``) in one answer (``merge``).
"""

from trainaudit.audit.pipeline import AuditInfo, AuditOptions, run_audit

__all__ = ["AuditInfo", "AuditOptions", "run_audit"]
