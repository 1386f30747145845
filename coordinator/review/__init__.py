"""Review of contributed sweeps: reviewer keys, the verdicts and their effects (the review
API and page are a face: ``coordinator.faces.review_api``).

Validated results wait in ``in_review`` (``sweeps.transitions.JOB_IN_REVIEW``);
a reviewer approves or rejects a job with a reason. Approval publishes the job's
facts and measurements to the seen layer (``seen.publish``) and covers its cells
through ``sweeps.coverage.mark_cells_covered``, in the same transaction.
"""
