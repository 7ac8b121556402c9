"""Under mutual TLS, an agent whose certificate does not name the address it registers under is refused at once,
saying so: it was taken, its every call failed the host name check, and it was declared lost as "heard one way
only" (multi-host review)."""

from vcemu.tls import certificate_refusal

SSL = {"transport_security_type": [b"ssl"]}


def test_a_certificate_naming_another_address_is_refused() -> None:
    why = certificate_refusal("10.200.0.13:52063", {**SSL, "x509_subject_alternative_name": [b"10.200.0.99"]})
    assert why is not None and "10.200.0.99" in why and "10.200.0.13" in why


def test_a_certificate_naming_the_address_is_taken() -> None:
    assert certificate_refusal("10.200.0.13:52063", {**SSL, "x509_subject_alternative_name": [b"10.200.0.13"]}) is None
    assert certificate_refusal("[fd00::13]:1", {**SSL, "x509_subject_alternative_name": [b"fd00:0::13"]}) is None
    named = {**SSL, "x509_subject_alternative_name": [b"node-3.example"]}
    assert certificate_refusal("Node-3.example:1", named) is None
    wildcard = {**SSL, "x509_subject_alternative_name": [b"*.rack.example"]}
    assert certificate_refusal("n3.rack.example:1", wildcard) is None
    assert certificate_refusal("a.n3.rack.example:1", wildcard)
    assert certificate_refusal("n3.example:1", {**SSL, "x509_common_name": [b"n3.example"]}) is None


def test_without_tls_nothing_is_checked() -> None:
    assert certificate_refusal("10.200.0.13:52063", {}) is None
