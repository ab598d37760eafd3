"""The tests of runbook_policy (run by ../test)."""
