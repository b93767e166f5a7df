"""`rmq-ha bench produce --secure`: the security variants' files and settings are what the roles
and the load generator accept (the run itself is the benchmark, not a test)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from rmq_jepsen.bench import produce

from rmq_ha import config
from rmq_ha.security.acl import load_acl_file


def parse(lines: list[str]) -> dict[str, str]:
    return config.parse_properties("\n".join(lines))


@pytest.mark.timeout(120)
@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl for test certs")
def test_secure_variants_make_valid_configs(tmp_path: Path) -> None:
    assert produce.SECURE_IMPLS.split(",") == [
        "rmq_ha",
        "rmq_ha+acl",
        "rmq_ha+tls",
        "rmq_ha+acl+tls",
    ]
    for impl in produce.SECURE_IMPLS.split(",")[1:]:
        assert impl in produce.IMPLS and produce.VARIANTS[impl][1] == 0.85
        ns, broker, jvm = produce._secure(impl, tmp_path / impl)
        ns_cfg, unknown = config.from_mapping(config.NamesrvConfig, parse(ns))
        assert not unknown
        b_cfg, unknown = config.from_mapping(config.BrokerConfig, parse(broker))
        assert not unknown
        if "+acl" in impl:
            assert b_cfg.acl_enable and not ns_cfg.acl_enable
            acl = load_acl_file(b_cfg.plain_acl_file)
            admin, user = produce.BENCH_ADMIN[0], produce.BENCH_USER[0]
            assert acl.accounts[admin].admin and not acl.accounts[user].admin
            assert f"-Drmqha.bench.acl={user}:{produce.BENCH_USER[1]}" in jvm
        if "+tls" in impl:
            assert b_cfg.tls_server_mode is config.TlsMode.ENFORCING and b_cfg.tls_enable
            assert ns_cfg.tls_server_mode is config.TlsMode.PERMISSIVE
            assert Path(b_cfg.tls_server_cert_path).exists()
            assert "-Dtls.enable=true" in jvm
        else:
            assert "-Dtls.enable=true" not in jvm
