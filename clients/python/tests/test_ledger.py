"""The keeper's ledger on its own: which holds it takes as confirmed at
once, given what its connection heard between an acquirer's mark and the
hold's arrival.  A hold wrongly taken as confirmed would miss a loss; one
wrongly left unconfirmed costs a renewal (and, under contention, a
wake-up of the keeper per grant: test/bench/wait_bench.py)."""

import json
import threading
import time
from datetime import timedelta

from dsync._ledger import NEWS_KEPT, Hold, Ledger
from dsync._sql import channel_of

NAME = "ledger-test"
CHANNEL = channel_of(NAME)
SENDER = 4242


def notice(kind, holder, token):
    return json.dumps({"event": kind, "lease": NAME, "holder": holder, "fencing": str(token)})


def ledger():
    led = Ledger()
    led.connected_anew(True, {SENDER})
    led.listened([CHANNEL])
    return led


def hold(holder="me", token=100):
    return Hold(None, NAME, holder, token, timedelta(seconds=30), True, time.monotonic(),
                threading.Event(), lambda: True, "thread")


def added(led, mark, h):
    led.add(h, mark)
    return h not in led.unverified


def test_nothing_heard_since_the_mark():
    led = ledger()
    assert added(led, led.mark(CHANNEL), hold())


def test_hand_offs_of_other_holders_and_earlier_tokens_are_no_news():
    """What contention sounds like: other holders acquire and release, and
    this holder's own earlier hold is released, all from dsync's sender."""
    led = ledger()
    mark = led.mark(CHANNEL)
    for i in range(5):
        led.judge(CHANNEL, notice("acquired", f"w{i}", 90 + i), SENDER)
        led.judge(CHANNEL, notice("released", f"w{i}", 90 + i), SENDER)
    led.judge(CHANNEL, notice("released", "me", 99), SENDER)
    led.judge(CHANNEL, notice("expired", "other", 98), SENDER)
    assert added(led, mark, hold())


def test_a_release_of_the_very_token_heard_before_the_hold_arrived_is_confirmed():
    led = ledger()
    mark = led.mark(CHANNEL)
    led.judge(CHANNEL, notice("released", "me", 100), SENDER)
    assert not added(led, mark, hold())


def test_a_notice_from_an_unknown_sender_about_the_holder_is_confirmed():
    led = ledger()
    mark = led.mark(CHANNEL)
    led.judge(CHANNEL, notice("released", "me", 99), 1)       # a forged NOTIFY
    assert not added(led, mark, hold())


def test_a_notice_with_no_token_about_the_holder_is_confirmed():
    led = ledger()
    mark = led.mark(CHANNEL)
    led.judge(CHANNEL, json.dumps({"event": "expired", "lease": NAME, "holder": "me"}), SENDER)
    assert not added(led, mark, hold())


def test_news_no_longer_on_record_is_confirmed():
    """More releases than are kept on record since the mark: the hold is
    confirmed, whatever the ones still on record say."""
    led = ledger()
    mark = led.mark(CHANNEL)
    for i in range(NEWS_KEPT + 1):
        led.judge(CHANNEL, notice("released", f"w{i}", 50 + i), SENDER)
    assert not added(led, mark, hold())
    # A mark taken after the dropped one is judged on the record again.
    mark = led.mark(CHANNEL)
    led.judge(CHANNEL, notice("released", "w0", 80), SENDER)
    assert added(led, mark, hold(token=101))


def test_a_new_connection_or_listen_since_the_mark_is_confirmed():
    led = ledger()
    mark = led.mark(CHANNEL)
    led.connected_anew(True, {SENDER})
    led.listened([CHANNEL])
    assert not added(led, mark, hold())
    led = ledger()
    mark = led.mark(CHANNEL)
    led.unlistened([CHANNEL])
    led.listened([CHANNEL])
    assert not added(led, mark, hold())


def test_no_mark_is_confirmed():
    assert not added(ledger(), None, hold())


def test_a_notice_that_is_not_dsyncs_is_no_news_and_never_raises():
    """Anyone may NOTIFY a channel: a payload that only looks like dsync's
    must not stop the keeper (it used to raise, and the keeper dropped its
    connection, again and again)."""
    led = ledger()
    h = hold()
    led.add(h, led.mark(CHANNEL))
    for payload in ('{"event": "released", "lease": "ledger-test", "holder": "me", "fencing": "abc"}',
                    '{"event": "expired", "lease": "ledger-test", "holder": "me", "expires_at": 5}',
                    'not json', '[]'):
        assert led.judge(CHANNEL, payload, SENDER) == ([], False)
