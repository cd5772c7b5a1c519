"""The Python API of the engine: decisions, their waits, bad inputs refused with the Rust
error's message and nothing charged, profiles with line and column, snapshots, threads."""

from __future__ import annotations

import threading

import pytest

import tollgate
from tollgate import InvalidCost, InvalidKey, Limiter, Profile, ProfileError, UnknownRouteClass

ONE_CLASS = """\
name: one
identities: { capacity: 1024 }
route_classes:
  write:
    burst:     { tokens: 2,    per: 1m }
    sustained: { tokens: 1200, per: 1h }
  fixed:
    burst:     { tokens: 100, per: 1h }
    sustained: { tokens: 100, per: 1h }
retry_after: { max: 1h }
"""


@pytest.fixture
def limiter() -> Limiter:
    return Limiter.from_yaml(ONE_CLASS)


def test_admits_the_burst_then_throttles_with_the_exact_wait(limiter):
    write = limiter.route_class("write")
    assert limiter.admit("acme", "alice", write).admitted
    assert limiter.admit("acme", "alice", write)
    d = limiter.admit("acme", "alice", write)
    assert not d and not d.admitted
    assert (d.status, d.bucket, d.cause, d.outcome, d.code) == (429, "burst", None, "throttled", "rate_limited")
    assert 29.0 < d.retry_after <= 30.0
    assert d.retry_after_secs == 30
    # Another principal of the same tenant has buckets of its own.
    assert limiter.admit("acme", "bob", "write").admitted


def test_the_refusal_is_the_rust_http_answer(limiter):
    for _ in range(3):
        d = limiter.admit("acme", "alice", "write")
    status, headers, body = d.refusal("req-7")
    assert status == 429
    assert dict(headers)["retry-after"] == "30"
    assert dict(headers)["x-request-id"] == "req-7"
    assert dict(headers)["ratelimit-policy"] == '"burst";q=2;w=60, "sustained";q=1200;w=3600'
    assert b'"request_id":"req-7"' in body and b"acme" not in body
    assert limiter.admit("acme", "carol", "write").refusal() is None


def test_cost_is_charged_all_or_nothing(limiter):
    fixed = limiter.route_class("fixed")
    assert limiter.admit("t", "p", fixed, cost=60).admitted
    refused = limiter.admit("t", "p", fixed, cost=41)
    assert refused.status == 429 and refused.retry_after is not None
    assert limiter.admit("t", "p", fixed, cost=40).admitted
    assert not limiter.admit("t", "p", fixed, cost=0).admitted  # a check, nothing taken
    too_big = limiter.admit("t", "q", fixed, cost=101)
    assert (too_big.status, too_big.outcome, too_big.retry_after) == (429, "exceeds", None)


@pytest.mark.parametrize("cost", [-1, 2**32, 10**30])
def test_a_bad_cost_is_refused_and_charges_nothing(limiter, cost):
    with pytest.raises(InvalidCost, match="whole number"):
        limiter.admit("t", "p", "write", cost=cost)
    with pytest.raises(TypeError):
        limiter.admit("t", "p", "write", cost=1.5)
    assert limiter.admit("t", "p", "write").admitted
    assert limiter.admit("t", "p", "write").admitted


@pytest.mark.parametrize(
    "tenant, principal, message",
    [("", "p", "tenant id is empty"), ("t", "", "principal id is empty"), ("t" * 1025, "p", "longer than 1024")],
)
def test_a_bad_key_is_a_value_error_with_the_rust_message(limiter, tenant, principal, message):
    with pytest.raises(InvalidKey, match=message) as info:
        limiter.admit(tenant, principal, "write")
    assert isinstance(info.value, ValueError)


def test_anonymous_callers_share_their_network_prefix(limiter):
    assert limiter.admit_anonymous("203.0.113.9", "write").admitted
    assert limiter.admit_anonymous("203.0.113.200", "write").admitted
    assert limiter.admit_anonymous("203.0.113.1", "write").status == 429
    assert limiter.admit_anonymous("2001:db8::1", "write").admitted
    with pytest.raises(InvalidKey, match="not an IPv4 or IPv6 address"):
        limiter.admit_anonymous("203.0.113", "write")


def test_route_classes_are_checked(limiter):
    with pytest.raises(UnknownRouteClass, match="no route class \"nope\""):
        limiter.route_class("nope")
    with pytest.raises(KeyError):
        limiter.admit("t", "p", "nope")
    other = Limiter.from_yaml(ONE_CLASS).route_class("write")
    with pytest.raises(UnknownRouteClass, match="is another limiter"):
        limiter.admit("t", "p", other)
    assert limiter.route_class("fixed").index == 1


def test_a_bad_profile_names_its_line_and_column(tmp_path):
    bad = ONE_CLASS.replace("tokens: 2,", "tokens: 0,")
    with pytest.raises(ProfileError) as info:
        Profile.from_yaml(bad)
    e = info.value
    assert (e.line, e.column, e.kind) == (5, 26, "invalid")
    assert "line 5 column 26" in str(e) and "route_classes.write.burst.tokens" in str(e)
    path = tmp_path / "bad.yaml"
    path.write_text(ONE_CLASS.replace("route_classes:", "route_classe:"))
    with pytest.raises(ProfileError) as info:
        Limiter.from_yaml(str(path))
    assert info.value.line == 3 and info.value.kind == "syntax"
    with pytest.raises(ProfileError) as info:
        Limiter.from_yaml(tmp_path / "missing.yaml")
    assert info.value.kind == "io" and info.value.line is None


def test_a_refused_reload_keeps_the_old_profile(limiter):
    for _ in range(2):
        limiter.admit("acme", "alice", "write")
    dropped = ONE_CLASS.split("  fixed:")[0] + "retry_after: { max: 1h }\n"
    with pytest.raises(ProfileError) as info:
        limiter.reload(dropped)
    assert info.value.kind == "reload"
    assert [c["name"] for c in limiter.published_limits()["route_classes"]] == ["write", "fixed"]
    # Bucket state survives a reload that is accepted.
    limiter.reload(ONE_CLASS.replace("name: one", "name: two"))
    assert limiter.profile.name == "two"
    assert limiter.admit("acme", "alice", "write").status == 429


def test_published_limits_are_the_discovery_document(limiter):
    doc = limiter.published_limits()
    assert doc["profile"] == "one"
    assert doc["route_classes"][0]["burst"] == {"tokens": 2, "per": "1m"}
    assert limiter.published_limits_json().startswith("{")


def test_a_snapshot_restores_the_buckets(tmp_path):
    secret = b"s" * 32
    limiter = Limiter(Profile.from_yaml(ONE_CLASS), key_secret=secret)
    for _ in range(2):
        limiter.admit("acme", "alice", "write")
    path = tmp_path / "state.tgsnap"
    assert limiter.snapshot(path) == 1
    restored = Limiter.restore(ONE_CLASS, path, key_secret=secret)
    assert restored.admit("acme", "alice", "write").status == 429
    assert restored.admit("acme", "bob", "write").admitted
    with pytest.raises(tollgate.SnapshotError, match="refused"):
        Limiter.restore(ONE_CLASS, path, key_secret=b"t" * 32)
    with pytest.raises(tollgate.SnapshotError, match="cannot snapshot"):
        limiter.snapshot(tmp_path / "no-such-dir" / "state.tgsnap")


def test_threads_never_admit_more_than_the_bucket_holds(limiter):
    fixed = limiter.route_class("fixed")
    admitted = []

    def worker() -> None:
        n = sum(limiter.admit("acme", "shared", fixed).admitted for _ in range(50))
        admitted.append(n)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(admitted) == 100


def test_admit_request_follows_the_profile_routes(tmp_path):
    limiter = Limiter.from_yaml(str(__import__("pathlib").Path(__file__).parent / "profiles" / "contract.yaml"))
    assert limiter.admit_request("GET", "/health") is None
    assert limiter.classify("POST", "/v1/reports/run").name == "expensive"
    a = limiter.admit_request("GET", "/v1/items?x=1", peer="192.0.2.1", request_id="r-1")
    assert (a.admitted, a.status, a.route_class, a.body) == (True, 200, "read", None)
    assert ("x-request-id", "r-1") in a.headers
    forced = limiter.admit_request("GET", "/health", tenant="t", principal="p", cls="expensive")
    assert forced.route_class == "expensive"
    with pytest.raises(InvalidKey, match="go together"):
        limiter.admit_request("GET", "/v1/items", tenant="t")
    with pytest.raises(ValueError, match="not an HTTP method"):
        limiter.admit_request("BAD METHOD", "/v1/items")


def test_a_pin_decides_as_its_key_does(limiter):
    pin = limiter.pin("acme", "alice", "write")
    assert isinstance(pin, tollgate.Pinned)
    assert pin.route_class == "write"
    # The pin and the key it was made from share their buckets: two tokens in all.
    assert limiter.admit_pinned(pin).admitted
    assert limiter.admit("acme", "alice", "write").admitted
    refused = limiter.admit_pinned(pin)
    assert (refused.status, refused.bucket) == (429, "burst")
    assert 29.0 < refused.retry_after <= 30.0
    assert dict(refused.refusal()[1])["ratelimit-policy"] == '"burst";q=2;w=60, "sustained";q=1200;w=3600'
    # Another principal's pin has buckets of its own.
    assert limiter.admit_pinned(limiter.pin("acme", "bob", limiter.route_class("write"))).admitted


def test_an_anonymous_pin_is_its_network_prefix(limiter):
    pin = limiter.pin_anonymous("192.0.2.7", "write")
    assert limiter.admit_pinned(pin).admitted
    # The same /24 (the default IPv4 prefix) is the same caller.
    assert limiter.admit_anonymous("192.0.2.200", "write").admitted
    assert not limiter.admit_pinned(pin).admitted


def test_a_pin_shows_nothing_of_its_caller(limiter):
    pin = limiter.pin("acme-secret-tenant", "alice-secret", "write")
    assert repr(pin) == 'Pinned(route_class="write")'
    assert "secret" not in repr(pin) and "secret" not in str(pin)


def test_bad_pins_are_refused_and_charge_nothing(limiter):
    with pytest.raises(InvalidKey):
        limiter.pin("", "alice", "write")
    with pytest.raises(InvalidKey):
        limiter.pin_anonymous("not an address", "write")
    with pytest.raises(UnknownRouteClass):
        limiter.pin("acme", "alice", "nope")
    other = Limiter.from_yaml(ONE_CLASS)
    foreign = other.pin("acme", "alice", "write")
    with pytest.raises(InvalidKey, match="another limiter"):
        limiter.admit_pinned(foreign)
    with pytest.raises(TypeError):
        limiter.admit_pinned("acme")
    # Nothing was charged to the key of the foreign pin, here or on its own limiter.
    for lim in (limiter, other):
        assert lim.admit("acme", "alice", "write").admitted
        assert lim.admit("acme", "alice", "write").admitted
        assert not lim.admit("acme", "alice", "write").admitted


def test_a_pin_decides_under_the_profile_in_force(limiter):
    pin = limiter.pin("acme", "alice", "write")
    assert limiter.admit_pinned(pin).admitted
    limiter.reload(ONE_CLASS.replace("tokens: 2,    per: 1m", "tokens: 4,    per: 1m"))
    assert [limiter.admit_pinned(pin).admitted for _ in range(4)] == [True, True, True, False]


def test_a_refusal_after_a_reload_that_reorders_the_classes_has_its_own_class_policy(limiter):
    # The same classes with write listed last, and one added in front: handles keep their
    # numbers, the profile its new order.
    write = "  write:\n    burst:     { tokens: 2,    per: 1m }\n    sustained: { tokens: 1200, per: 1h }\n"
    added = "  added:\n    burst:     { tokens: 9, per: 1s }\n    sustained: { tokens: 9, per: 1h }\n"
    reordered = ONE_CLASS.replace(write, "").replace("retry_after:", write + "retry_after:")
    reordered = reordered.replace("route_classes:\n", "route_classes:\n" + added)
    assert reordered.index("added:") < reordered.index("fixed:") < reordered.index("write:")
    limiter.reload(reordered)
    for _ in range(2):
        assert limiter.admit("acme", "alice", "write").admitted
    refused = limiter.admit("acme", "alice", "write")
    assert dict(refused.refusal()[1])["ratelimit-policy"] == '"burst";q=2;w=60, "sustained";q=1200;w=3600'
    assert limiter.pin("acme", "alice", "write").route_class == "write"
