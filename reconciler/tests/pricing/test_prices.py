"""The price table: the catalog's file, overrides merged key by key in order, errors that name the file and the
key, the local host's price (the environment variable wins), and model sizes from annotations, files and names."""

from __future__ import annotations

import json
import struct
from decimal import Decimal
from pathlib import Path

import pytest

from nodus.errors import ConfigError
from nodus.reconciler.pricing import model_size
from nodus.reconciler.pricing.costs import endpoint_monthly
from nodus.reconciler.pricing.prices import catalog_table, launch_price, load_prices

REPO = Path(__file__).resolve().parents[3]


def test_the_catalog_table_is_found_and_prices_the_preset_gpu_types() -> None:
    path = catalog_table()
    assert path == REPO / "catalog" / "prices.yaml"
    table = load_prices(environ={})
    assert table.file == str(path) and table.overrides == () and table.version == "2026-11-29"
    for gpu_type in ("rtx4090-24g", "l4-24g", "a100-80g", "h100-sxm-80g"):
        assert table.gpu_rate(gpu_type) is not None, gpu_type
        assert table.gpu_rate(gpu_type, "community") is not None, gpu_type
    assert table.local_rate() == Decimal("0.00")
    assert table.token_price("nodus/gpt-oss-120b") is not None


def test_the_catalog_table_is_no_resource_for_nodus_validate() -> None:
    from nodus.specs.parse import parse_resources

    result = parse_resources([REPO / "catalog"])
    assert result.ok, [str(problem) for problem in result.errors]
    assert str(REPO / "catalog" / "prices.yaml") in result.files


def test_overrides_merge_key_by_key_in_order(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text('version: "1"\ngpu:\n  a100-80g: {cloud: "1.64", community: "1.19"}\ncpu: {local: "0"}\n')
    organisation = tmp_path / "org.yaml"
    organisation.write_text('version: "org-7"\ngpu:\n  a100-80g: {cloud: "1.20"}\n  l4-24g: {cloud: "0.40"}\n')
    project = tmp_path / "project"
    project.mkdir()
    (project / "prices.yaml").write_text('cpu: {local: "0.50"}\n')
    explicit = tmp_path / "flag.yaml"
    explicit.write_text('gpu:\n  l4-24g: {cloud: "0.35"}\n')
    env = {"NODUS_PRICES": str(organisation)}
    table = load_prices(project_root=project, prices_file=explicit, environ=env, catalog=catalog)
    assert table.version == "org-7"
    assert table.gpu_rate("a100-80g") == Decimal("1.20")  # the organisation's
    assert table.gpu_rate("a100-80g", "community") == Decimal("1.19")  # kept from the catalog: merged, not replaced
    assert table.gpu_rate("l4-24g") == Decimal("0.35")  # --prices wins
    assert table.local_rate() == Decimal("0.50")  # the project's
    assert table.ref() == {
        "version": "org-7",
        "file": str(catalog),
        "overrides": [str(organisation), str(project / "prices.yaml"), str(explicit)],
    }
    assert launch_price(table).per_hour_usd == Decimal("0.50")
    assert launch_price(table).source == f"cpu.local of {project / 'prices.yaml'}"


def test_the_local_price_variable_wins_and_is_named(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text('version: "1"\ncpu: {local: "0.00"}\n')
    table = load_prices(environ={"NODUS_LOCAL_PRICE_PER_HOUR": "3.60"}, catalog=catalog)
    assert table.local_rate() == Decimal("3.60")
    price = launch_price(table)
    assert price.to_status() == {"version": "1", "perHourUSD": "3.60", "source": "$NODUS_LOCAL_PRICE_PER_HOUR"}
    with pytest.raises(ConfigError, match=r"\$NODUS_LOCAL_PRICE_PER_HOUR: must be a decimal amount"):
        load_prices(environ={"NODUS_LOCAL_PRICE_PER_HOUR": "lots"}, catalog=catalog)


def test_without_any_table_nothing_is_priced_and_the_host_is_free(tmp_path: Path) -> None:
    from nodus.reconciler.pricing.prices import table_from_layers

    table = table_from_layers([])
    assert table.version == "none" and table.gpu_rate("a100-80g") is None and table.local_rate() is None
    assert launch_price(table).per_hour_usd == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpu:\n  a100-80g: {cloud: 1.64}\n", r"bad\.yaml: gpu\.a100-80g\.cloud: must be a decimal amount .*1\.64"),
        ("gpu:\n  A100: {cloud: '1'}\n", r"bad\.yaml: gpu\.A100: not a GPU type id"),
        ("gpus: {}\n", r"bad\.yaml: gpus: unknown key"),
        ("currency: EUR\n", r"bad\.yaml: currency: only USD"),
        ("inference:\n  gpt-oss-20b: {in: '1'}\n", r"bad\.yaml: inference\.gpt-oss-20b\.in: unknown key"),
        ("cpu: [1]\n", r"bad\.yaml: cpu: must be a mapping"),
        ("gpu: {a100-80g: {cloud: '1'}\n", r"bad\.yaml:\d+: not valid YAML"),
    ],
)
def test_a_bad_table_is_one_line_naming_the_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_prices(prices_file=bad, environ={}, catalog=bad)


def test_a_missing_organisation_table_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\$NODUS_PRICES: .* is not a file"):
        load_prices(environ={"NODUS_PRICES": str(tmp_path / "nope.yaml")})


def test_model_sizes_from_names_annotations_and_files(tmp_path: Path) -> None:
    assert model_size.parse_count("600M") == 600_000_000 and model_size.parse_count("0.6B") == 600_000_000
    assert model_size.parse_count("lots") is None
    named = {
        "hf://Qwen/Qwen3-0.6B@" + "a" * 40: 600_000_000,
        "hf://Qwen/Qwen3-30B-A3B@" + "a" * 40: 30 * 10**9,
        "hf://openai/gpt-oss-120b@" + "a" * 40: 120 * 10**9,
        "hf://nodus/tiny-qwen3@" + "a" * 40: None,
    }
    for uri, count in named.items():
        found = model_size.from_name(uri)
        assert (found.parameters if found else None) == count, uri
    assert model_size.format_count(140_000) == "140K" and model_size.format_count(8 * 10**9) == "8B"

    # safetensors headers: shapes counted without reading tensors.
    header = json.dumps({"a": {"dtype": "F32", "shape": [64, 100], "data_offsets": [0, 1]}, "__metadata__": {}})
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header.encode())
    found = model_size.from_folder(tmp_path)
    assert found is not None and found.parameters == 6400 and "safetensors" in found.source
    (tmp_path / "model.safetensors").unlink()
    config = {"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 400, "num_attention_heads": 4}
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_key_value_heads": 2, "head_dim": 16}))
    found = model_size.from_folder(tmp_path)
    assert found is not None and found.source == f"config.json of {tmp_path.name}"
    assert found.parameters == 400 * 64 + 2 * (64 * 64 * 2 + 64 * 32 * 2 + 3 * 64 * 256)


def test_an_endpoint_month_is_bounded_by_its_tpm_or_unpriced() -> None:
    table = load_prices(environ={})
    endpoint = {"spec": {"model": "nodus/gpt-oss-120b", "tpm": 100_000}}
    monthly, reason = endpoint_monthly(endpoint, table)
    assert reason is None and monthly == Decimal("1134.00")  # 100k x 43,200 minutes x (3 x 0.15 + 0.60) / 4 / 1M
    monthly, reason = endpoint_monthly({"spec": {"model": "nodus/gpt-oss-120b"}}, table)
    assert monthly is None and reason is not None and "no tpm limit" in reason
    monthly, reason = endpoint_monthly({"spec": {"model": "acme/secret-model", "tpm": 5}}, table)
    assert monthly is None and reason is not None and "no per-token price for acme/secret-model" in reason
    assert endpoint_monthly({"spec": {"model": "acme/x", "state": "Stopped"}}, table) == (Decimal(0), None)
