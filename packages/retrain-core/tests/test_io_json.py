from retrain.io.json import decode_object, load_json_object


def test_decode_object_accepts_objects_only():
    assert decode_object(b'{"a": 1}') == {"a": 1}
    assert decode_object('{"a": [1, 2]}') == {"a": [1, 2]}
    for bad in (b"", b"   ", b"[1, 2]", b"3", b'{"a": 1', b"\xff\xfe", b"null"):
        assert decode_object(bad) is None


def test_decode_object_reads_python_nan_literals():
    row = decode_object(b'{"loss": NaN, "x": Infinity}')
    assert row is not None
    assert row["loss"] != row["loss"]
    assert row["x"] == float("inf")


def test_load_json_object_tolerates_missing_and_damaged_files(tmp_path):
    assert load_json_object(tmp_path / "missing.json") is None
    (tmp_path / "half.json").write_text('{"step": 3, "checkpoint_na')
    assert load_json_object(tmp_path / "half.json") is None
    (tmp_path / "list.json").write_text("[1]")
    assert load_json_object(tmp_path / "list.json") is None
    (tmp_path / "ok.json").write_text('{"step": 3}')
    assert load_json_object(tmp_path / "ok.json") == {"step": 3}
    (tmp_path / "big.json").write_text('{"k": "' + "x" * 100 + '"}')
    assert load_json_object(tmp_path / "big.json", max_bytes=50) is None
    assert load_json_object(tmp_path) is None
