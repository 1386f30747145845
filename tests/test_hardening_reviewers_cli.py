"""``sis reviewers create`` takes ``--name`` as ``sis keys create`` does (issue 31, item 14);
the positional name of older scripts still works."""
from __future__ import annotations

from tests.test_access_embed import sis


async def test_a_reviewer_is_created_with_name_as_a_key_is(sqlite_url):
    rc, out, err = await sis("reviewers", "create", "--name", "Rita Reviewer", "--database", sqlite_url)
    assert rc == 0, err
    assert "(Rita Reviewer)" in out and "key (shown once" in out
    assert f"in SQLite file {sqlite_url.split(':///', 1)[1]}" in out        # which database the key is in
    rc, out, err = await sis("reviewers", "create", "Old Script", "--database", sqlite_url)   # kept for old scripts
    assert rc == 0, err
    assert "(Old Script)" in out
    rc, out, err = await sis("reviewers", "list", "--database", sqlite_url)
    assert rc == 0 and "Rita Reviewer" in out and "Old Script" in out and "2 reviewers" in out


async def test_a_reviewer_needs_one_name(sqlite_url):
    rc, out, err = await sis("reviewers", "create", "--database", sqlite_url)
    assert rc == 2 and out == "" and "--name" in err
    rc, out, err = await sis("reviewers", "create", "A", "--name", "B", "--database", sqlite_url)
    assert rc == 2 and out == "" and "--name" in err
    rc, out, err = await sis("reviewers", "create", "--help")
    assert rc == 0 and "--name" in out and "older scripts" in out
