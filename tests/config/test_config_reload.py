"""diff_quota_settings: the lines a live reload logs."""

from kqp.config import diff_quota_settings, quota_settings_from


def settings(*entries: dict, window: float = 1, count: int = 11):
    return quota_settings_from({"window_size_seconds": window, "window_count": count, "entities": list(entries)})


def test_no_change_no_lines() -> None:
    old = settings({"user": "a", "request_rate": 5})
    assert diff_quota_settings(old, settings({"user": "a", "request_rate": 5.0})) == []


def test_added_removed_changed_one_line_each_in_a_stable_order() -> None:
    old = settings(
        {"user": "alice", "client_id": "w", "producer_byte_rate": 1048576, "request_rate": 500},
        {"client_id": "<default>", "request_rate": 100},
        {"user": "zed", "consumer_byte_rate": 10},
    )
    new = settings(
        {"user": "zed", "consumer_byte_rate": 10},  # unchanged, moved: no line
        {"user": "alice", "client_id": "w", "producer_byte_rate": 2097152, "request_percentage": 12.5},
        {"user": "bob", "consumer_byte_rate": 0.5},
    )
    assert diff_quota_settings(old, new) == [
        "quota removed for /clients/<default>: request_rate=100",
        "quota changed for /users/alice/clients/w: producer_byte_rate 1048576 -> 2097152, "
        "request_rate 500 -> unset, request_percentage unset -> 12.5",
        "quota added for /users/bob: consumer_byte_rate=0.5",
    ]


def test_window_settings_are_reported() -> None:
    assert diff_quota_settings(settings(), settings(window=0.5, count=30)) == [
        "quota window_size_seconds changed: 1 -> 0.5",
        "quota window_count changed: 11 -> 30",
    ]
