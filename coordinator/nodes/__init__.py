"""The node protocol under ``/node/v1``: enrolment, leases, heartbeats, results
(see ``docs/node-protocol.md``). Node routes are not tools of the public API."""
