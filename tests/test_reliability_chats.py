"""Chats whose role order cannot be a training example (``--messages-column``, in ``sketch``
and ``select``): one line naming the file and row, before the model loads when the role
order shows it; and the tokenizer's own chat-template refusal, found after the model loads,
is one line naming the file and row as well."""

import json

import pytest

from test_cli import _save_tiny
from updatescope.cli import main
from updatescope.data.formats import Columns, read_table, to_examples
from updatescope.errors import InputError

NO_MODEL = "no-such-model-folder"
GOOD = [{"role": "user", "content": "the a"}, {"role": "assistant", "content": "of to"}]
BAD_ORDERS = {
    "assistant first": [{"role": "assistant", "content": "the a"}, {"role": "user", "content": "of"}],
    "system then assistant": [{"role": "system", "content": "be"}, {"role": "assistant", "content": "the a"}],
    "tool first": [{"role": "tool", "content": "x"}, {"role": "assistant", "content": "the a"}],
}


def _table(tmp_path, chat):
    p = tmp_path / "chats.jsonl"
    p.write_text("\n".join(json.dumps({"messages": m}) for m in (GOOD, chat, GOOD)) + "\n")
    return p


def _bad(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    assert err.startswith("updatescope: error:") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("order", list(BAD_ORDERS))
def test_role_order_refused_before_the_model(tmp_path, capsys, order):
    data = _table(tmp_path, BAD_ORDERS[order])
    sketch = ["sketch", "--model", NO_MODEL, "--data", data, "--messages-column", "messages"]
    select = ["select", "--model", NO_MODEL, "--data", data, "--messages-column", "messages", "--target", data]
    for argv in (
        [*sketch, "--out", tmp_path / "s.safetensors", "--quiet"],
        [*select, "--top", "1", "--out", tmp_path / "top.jsonl", "--quiet"],
    ):
        err = _bad(capsys, *argv)
        assert f"{data}: row 1" in err and "'user'" in err and NO_MODEL not in err, err
    assert not (tmp_path / "s.safetensors").exists() and not (tmp_path / "top.jsonl").exists()


class _RefusingTokenizer:
    """A tokenizer whose chat template refuses two user turns in a row (as strict templates do)."""

    chat_template = "strict"

    def apply_chat_template(self, messages, tokenize=True, add_generation_prompt=False):
        roles = [m["role"] for m in messages]
        if any(a == b for a, b in zip(roles, roles[1:])):
            raise ValueError("Conversation roles must alternate user/assistant/user/assistant/...")
        if not messages:
            raise ValueError("Cannot apply chat template to an empty conversation.")
        return list(range(3 * len(messages) + add_generation_prompt))


def test_template_refusal_names_file_and_row(tmp_path):
    twice = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, {"role": "assistant", "content": "c"}]
    data = _table(tmp_path, twice)
    cols = Columns(messages="messages")
    rows = read_table(data, cols)  # the role order is fine: only the template can refuse it
    assert rows[0] == {"messages": GOOD} and json.loads(json.dumps(rows[1])) == {"messages": twice}
    with pytest.raises(
        InputError, match=rf"{data}: row 1: the tokenizer's chat template refuses this chat: .*alternate"
    ):
        to_examples(rows, cols, _RefusingTokenizer())


def test_template_refusal_after_load_is_one_line(tmp_path, capsys):
    """Through ``sketch --quiet`` on a tiny saved Llama whose chat template raises: exactly one
    stderr line (no loading bar, no traceback) naming the file and row."""
    model = _save_tiny(tmp_path / "m", 0)
    cfg_path = model / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = (
        "{% for m in messages %}{% if loop.index0 > 0 and m['role'] == messages[loop.index0 - 1]['role'] %}"
        "{{ raise_exception('roles must alternate') }}{% endif %}{{ m['role'] + ' ' + m['content'] + ' ' }}"
        "{% endfor %}{% if add_generation_prompt %}{{ 'assistant ' }}{% endif %}"
    )
    cfg_path.write_text(json.dumps(cfg))
    twice = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, {"role": "assistant", "content": "c"}]
    data = _table(tmp_path, twice)
    capsys.readouterr()
    err = _bad(
        capsys,
        "sketch",
        "--model",
        model,
        "--data",
        data,
        "--messages-column",
        "messages",
        "--out",
        tmp_path / "s.safetensors",
        "--quiet",
    )
    assert f"{data}: row 1" in err and "roles must alternate" in err, err
    assert not (tmp_path / "s.safetensors").exists()
