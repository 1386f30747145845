"""An embed token's origin (issue 31, item 6) flows into ``Access-Control-Allow-Origin``
and ``Content-Security-Policy: frame-ancestors``, so it is checked where it is minted,
by the API and by ``sis embed mint``, to be scheme://host[:port] with a valid host and
nothing else: no ``;``, space, quote or other character that would reach a header."""
from __future__ import annotations

import pytest

from coordinator.core.access import credentials as creds
from coordinator.core.errors import BadParameter
from tests.test_access_embed import sis
from tests.test_access_support import embed, key
from tests.test_error_shape import assert_error_shape

HOSTILE = ["https://maps.example.org; script-src *", "https://maps.example.org;", "https://maps example.org",
           'https://maps.example.org"', "https://maps.example.org'", "https://'maps'.example.org",
           "https://maps.example.org,https://evil.example", "https://<x>.example", "https://maps.example.org\\",
           "https://maps.example.org\r\nX-Evil: 1", "https://exa\tmple.org", "https://ex%61mple.org",
           "https://-maps.example.org", "https://maps-.example.org", "https://maps..example.org",
           "https://" + "a" * 64 + ".example", "https://" + ".".join(["abcdefgh"] * 32) + ".org",
           "https://user@maps.example.org", "https://maps.example.org.", "https://maps.example.org/x",
           "https://maps.example.org?x=1", "https://maps.example.org#x", "https://maps.example.org:0",
           "https://maps.example.org:99999", "https://maps.example.org:8a", "ftp://maps.example.org",
           "http://maps.example.org", "https://", "https://[::1", "https://[zz::1]", "https://300.1.1.1",
           "https://maps_site.example.org", "null", "*", ""]

GOOD = {"https://maps.example.org": "https://maps.example.org",
        "  https://Maps.Example.ORG:443  ": "https://maps.example.org",
        "https://maps.example.org:8443": "https://maps.example.org:8443",
        "https://198.51.100.7": "https://198.51.100.7",
        "https://[2001:db8::1]:8443": "https://[2001:db8::1]:8443",
        "http://localhost:5173": "http://localhost:5173",
        "http://127.0.0.1": "http://127.0.0.1",
        "https://bücher.example": "https://xn--bcher-kva.example",
        "https://faß.de": "https://xn--fa-hia.de",              # not fass.de, another site (IDNA 2003)
        "https://ÉCOLE.fr": "https://xn--cole-9oa.fr",
        "https://a-b.c1.example.org/": "https://a-b.c1.example.org"}


@pytest.mark.parametrize("origin", HOSTILE)
def test_an_origin_that_is_not_scheme_host_port_is_refused(origin):
    with pytest.raises(BadParameter) as err:
        creds.normalise_origin(origin)
    assert err.value.details["parameter"] == "origin"


@pytest.mark.parametrize("origin,normal", sorted(GOOD.items()))
def test_an_origin_is_kept_as_browsers_send_it(origin, normal):
    assert creds.normalise_origin(origin) == normal


async def test_the_api_refuses_a_hostile_origin_in_the_one_error_shape(coordinator):
    owner, _ = await key(coordinator, "Pro")
    for bad in HOSTILE:
        r = await coordinator.post(f"/public/v1/{owner}/embed-tokens", {"origin": bad})
        assert r.status == 400, (bad, r.status, r.body)
        assert_error_shape(r.json(), "bad_parameter")
    minted = await embed(coordinator, owner, origin="https://bücher.example")
    assert minted["origin"] == "https://xn--bcher-kva.example"
    r = await coordinator.get(f"/public/v1/{minted['token']}/events")
    assert r.status == 200
    assert r.headers["Access-Control-Allow-Origin"] == "https://xn--bcher-kva.example"


async def test_sis_embed_mint_refuses_a_hostile_origin_in_one_line(sqlite_url):
    rc, out, err = await sis("keys", "create", "--plan", "Basic", "--name", "site", "--database", sqlite_url)
    assert rc == 0, err
    key_id = out.split("\t")[0]
    for bad in ["https://maps.example.org; script-src *", 'https://maps.example.org"', "https://a b.example"]:
        rc, out, err = await sis("embed", "mint", key_id, "--origin", bad, "--database", sqlite_url)
        assert rc == 1 and out == "", (bad, out)
        assert err.count("\n") == 1 and err.startswith("sis embed: ") and "origin" in err, err
    rc, out, err = await sis("embed", "list", "--key", key_id, "--database", sqlite_url)
    assert rc == 0 and out == ""
