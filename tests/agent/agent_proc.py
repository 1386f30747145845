"""A real ``sis-node run`` process for the crash tests, with the engine swapped for one that
waits while the file named by ``SIS_TEST_HOLD`` exists (a gate another process can open)
and touches ``SIS_TEST_STARTED`` when a job reaches it. Everything else is the shipped CLI."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from node_agent import cli
from tests.agent.support import FakeEngine


class GatedEngine(FakeEngine):
    def run_job(self, job, images):
        Path(os.environ["SIS_TEST_STARTED"]).write_text(job.job_id)
        while Path(os.environ["SIS_TEST_HOLD"]).exists():
            time.sleep(0.02)
        return super().run_job(job, images)


def main() -> int:
    args = cli.build_parser().parse_args(sys.argv[1:])
    return cli.cmd_run(args, engine_factory=lambda device: GatedEngine())


if __name__ == "__main__":
    sys.exit(main())
