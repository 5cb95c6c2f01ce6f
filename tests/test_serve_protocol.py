"""lrtune serve: what a request may ask (OpenAI's schema, lrtune's fields), refused by name."""

from __future__ import annotations

import pytest

from lrtune.decodeconfig import DecodeConfig
from lrtune.serve.protocol import RequestError, ServerLimits, parse_request
from lrtune.serve.scheduler import safe_prefix, stop_cut

LIMITS = ServerLimits(defaults=DecodeConfig(gamma2=4), models=("m",), has_draft=True, gamma2_max=4)
CHAT = {"model": "m", "messages": [{"role": "user", "content": "What is 2+2?"}]}


def refused(body, kind="chat", limits=LIMITS) -> RequestError:
    with pytest.raises(RequestError) as e:
        parse_request(body, kind, limits)
    return e.value


def test_a_chat_request_maps_openai_and_lrtune_fields_onto_the_decode_config():
    req = parse_request(
        {**CHAT, "max_tokens": 64, "temperature": 0, "seed": 7, "stop": "\n", "method": "sd", "gamma2": 3},
        "chat",
        LIMITS,
    )
    assert (req.cfg.method, req.cfg.gamma2, req.cfg.max_new_tokens, req.cfg.seed) == ("sd", 3, 64, 7)
    assert req.stop == ("\n",) and req.messages == ({"role": "user", "content": "What is 2+2?"},)
    assert parse_request({**CHAT, "max_tokens": 5, "max_completion_tokens": 9}, "chat", LIMITS).cfg.max_new_tokens == 9


def test_text_parts_of_a_message_are_joined_and_other_parts_refused():
    req = parse_request(
        {
            "model": "m",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
        },
        "chat",
        LIMITS,
    )
    assert req.messages[0]["content"] == "ab"
    img = {"type": "image_url", "image_url": {"url": "http://x"}}
    assert refused({"model": "m", "messages": [{"role": "user", "content": [img]}]}).param == "messages[0].content[0]"


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"beam_width": 4}, "beam_width"),  # neither OpenAI's nor lrtune's
        ({"n": 2}, "n"),
        ({"logprobs": True}, "logprobs"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"temperature": "hot"}, "temperature"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"top_p": 2.0}, "top_p"),
        ({"gamma1": 99}, "gamma1"),
        ({"method": "beam"}, "method"),
        ({"schedule": "async"}, "schedule"),
        ({"gamma2": 5}, "gamma2"),  # the server's SD engine drafts 4
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"stop": [""]}, "stop"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),  # without stream
        ({"stream": "yes"}, "stream"),
    ],
)
def test_a_bad_or_unsupported_field_is_refused_naming_it(extra, param):
    e = refused({**CHAT, **extra})
    assert e.param == param and e.status == 400 and str(e).startswith(param)


def test_a_bad_message_names_its_index_and_field():
    e = refused({"model": "m", "messages": [{"role": "user", "content": "hi"}, {"role": "robot", "content": "x"}]})
    assert e.param == "messages[1].role" and "'user'" in str(e)
    assert refused({"model": "m", "messages": []}).param == "messages"
    assert refused({"messages": CHAT["messages"]}).param == "model"


def test_neutral_values_of_unsupported_fields_and_tags_are_accepted():
    req = parse_request({**CHAT, "n": 1, "presence_penalty": 0, "logprobs": False, "user": "u1"}, "chat", LIMITS)
    assert req.cfg.method == "lr+sd"


def test_an_unknown_model_is_a_404_and_a_body_that_is_no_object_a_400():
    assert refused({**CHAT, "model": "gpt-4"}).status == 404
    assert refused(["not", "an", "object"]).param is None


def test_lr_methods_need_a_loaded_draft():
    no_draft = ServerLimits(defaults=DecodeConfig(method="target"), models=("m",), has_draft=False, gamma2_max=0)
    assert parse_request(CHAT, "chat", no_draft).cfg.method == "target"
    for method in ("sd", "lr", "lr+sd"):
        assert refused({**CHAT, "method": method}, limits=no_draft).param == "method"


def test_a_completion_takes_one_text_or_one_list_of_ids_and_refuses_a_batch():
    assert parse_request({"model": "m", "prompt": "hi"}, "completion", LIMITS).prompt == "hi"
    assert parse_request({"model": "m", "prompt": [5, 6, 7]}, "completion", LIMITS).prompt == (5, 6, 7)
    assert parse_request({"model": "m", "prompt": ["hi"]}, "completion", LIMITS).prompt == "hi"
    assert refused({"model": "m", "prompt": ["a", "b"]}, "completion").param == "prompt"
    assert refused({"model": "m", "prompt": "  "}, "completion").param == "prompt"
    assert refused({"model": "m", "prompt": "hi", "echo": True}, "completion").param == "echo"


def test_stop_cut_finds_the_earliest_stop_sequence():
    assert stop_cut("abc\nde. x", ("\n", ". ")) == 3
    assert stop_cut("abcde", ("x",)) is None
    assert stop_cut("a.b.", (".",), start=2) == 3


def test_safe_prefix_holds_back_a_possible_stop_start_and_a_split_character():
    assert safe_prefix("answer: 4 EN", ("END",), final=False) == "answer: 4 "
    assert safe_prefix("answer: 4 EN", ("END",), final=True) == "answer: 4 EN"
    assert safe_prefix("caf\ufffd", (), final=False) == "caf"
    assert safe_prefix("plain", (), final=False) == "plain"


def test_method_auto_runs_what_the_server_resolved_at_start():
    req = parse_request({**CHAT, "method": "auto"}, "chat", LIMITS)
    assert req.auto and req.cfg.method == LIMITS.auto_method
    target_server = ServerLimits(
        defaults=DecodeConfig(), models=("m",), has_draft=True, gamma2_max=4, auto_method="target"
    )
    assert parse_request({**CHAT, "method": "auto"}, "chat", target_server).cfg.method == "target"
    assert not parse_request(CHAT, "chat", LIMITS).auto


def test_a_request_asking_a_schedule_its_method_cannot_run_is_refused_naming_the_schedule():
    e = refused({**CHAT, "method": "sd", "schedule": "score"})
    assert e.param == "schedule" and e.status == 400 and "--method sd has no draft steps" in str(e)
    sd_server = ServerLimits(defaults=DecodeConfig(method="sd"), models=("m",), has_draft=True, gamma2_max=4)
    assert refused({**CHAT, "schedule": "abort"}, limits=sd_server).param == "schedule"
    score_server = ServerLimits(
        defaults=DecodeConfig(schedule="score"), models=("m",), has_draft=True, gamma2_max=4, auto_method="sd"
    )  # the server's own schedule runs its LR requests; an sd request or auto's sd runs without it
    assert parse_request({**CHAT, "method": "sd"}, "chat", score_server).cfg.method == "sd"
    assert parse_request({**CHAT, "method": "auto", "schedule": "score"}, "chat", score_server).cfg.method == "sd"


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"max_tokens": "5"}, "max_tokens"),  # OpenAI's API refuses a string for an integer
        ({"max_tokens": True}, "max_tokens"),
        ({"max_tokens": 5.0}, "max_tokens"),
        ({"max_completion_tokens": "9"}, "max_completion_tokens"),
        ({"seed": "7"}, "seed"),
        ({"temperature": "0.5"}, "temperature"),
        ({"temperature": True}, "temperature"),
        ({"top_p": "1"}, "top_p"),
        ({"n": 1.0}, "n"),
        ({"stream_options": {"include_usage": 1}, "stream": True}, "stream_options.include_usage"),
        ({"gamma1": "2"}, "gamma1"),  # lrtune's own fields: DecodeConfig's strict types
        ({"gamma2": True}, "gamma2"),
        ({"max_tokens": -1, "max_completion_tokens": 9}, "max_tokens"),  # superseded, still a count
        ({"max_tokens": 10**9, "max_completion_tokens": 9}, "max_tokens"),
    ],
)
def test_request_fields_are_json_types_strictly_and_every_count_given_is_in_range(extra, param):
    e = refused({**CHAT, **extra})
    assert e.param == param and e.status == 400 and str(e).startswith(param)


def test_json_integers_pass_for_number_fields_and_the_completion_count_wins_over_max_tokens():
    req = parse_request(
        {**CHAT, "temperature": 1, "top_p": 1, "max_tokens": 5, "max_completion_tokens": 9}, "chat", LIMITS
    )
    assert (req.cfg.temperature, req.cfg.top_p, req.cfg.max_new_tokens) == (1.0, 1.0, 9)
    assert refused({"model": "m", "prompt": [5.0, 6.0]}, "completion").param == "prompt[0]"  # token ids: integers


@pytest.mark.parametrize(
    "body, kind, param",
    [
        ({"model": "m", "messages": [{"role": "user", "content": "a\ud800b"}]}, "chat", "messages[0].content"),
        (
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "\udfff"}]}]},
            "chat",
            "messages[0].content[0].text",
        ),
        ({"model": "m", "prompt": "\ud800"}, "completion", "prompt"),
        ({**CHAT, "stop": ["ok", "\ud83d"]}, "chat", "stop[1]"),
        ({**CHAT, "user\ud800": "u"}, "chat", "body"),  # a key: the object it is in
    ],
)
def test_a_lone_utf16_surrogate_is_no_text_and_is_refused_naming_its_field(body, kind, param):
    e = refused(body, kind)
    assert e.param == param and e.status == 400 and "surrogate" in str(e)
    str(e).encode("utf-8")  # the message itself is text a JSON response can carry
    paired = parse_request({"model": "m", "messages": [{"role": "user", "content": "\U0001f600"}]}, "chat", LIMITS)
    assert paired.messages[0]["content"] == "\U0001f600"  # a pair ("\ud83d\ude00" in JSON) is one character


def test_a_score_round_request_on_a_server_whose_verifier_compares_two_steps_is_a_400_naming_the_schedule():
    e = refused({**CHAT, "method": "lr", "schedule": "score"})  # LIMITS: a two-sided verifier (exact-like)
    assert e.param == "schedule" and e.status == 400 and "judges a draft step alone" in str(e)
    one_sided = ServerLimits(defaults=DecodeConfig(), models=("m",), has_draft=True, gamma2_max=4, one_sided=True)
    assert parse_request({**CHAT, "method": "lr", "schedule": "score"}, "chat", one_sided).cfg.score_rounds


@pytest.mark.parametrize(
    "extra,param",
    [({"method": "lr", "gamma2": 3}, "gamma2"), ({"method": "target", "draft_stop": -1.0}, "draft_stop")],
)
def test_a_request_field_its_method_does_not_read_is_a_400_naming_it(extra, param):
    e = refused({**CHAT, **extra})
    assert e.param == param and e.status == 400 and "runs no" in str(e)
    assert parse_request({**CHAT, "method": "lr+sd", "gamma2": 3}, "chat", LIMITS).cfg.gamma2 == 3
