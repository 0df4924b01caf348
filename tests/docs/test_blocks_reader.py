"""How tests/docs/blocks.py reads a page: a misread page would run nothing, or run output as commands."""

from __future__ import annotations

import subprocess

import pytest

from tests.docs.blocks import blocks, console_commands, expecting_exits, without_pip_install

PAGE = """# Title

```bash
eagleconv inspect fixtures/x
```

## Serving

<!-- needs: vllm, server -->
```bash
vllm serve target
```

```text
output, not run
```

- a list item:

  ```python
  print("indented")
  ```

```console
$ eagleconv downgrade a \\
    /tmp/b
eagleconv: error: a: nothing was written
```
"""


def test_blocks_are_read_with_heading_marker_and_number(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    found = blocks(page)
    assert [(b.heading, b.lang, b.nth, b.needs) for b in found] == [
        ("Title", "bash", 1, []),
        ("Serving", "bash", 1, ["vllm", "server"]),
        ("Serving", "python", 2, []),
        ("Serving", "console", 3, []),
    ]
    assert found[2].text == 'print("indented")\n'  # the list item's indent is removed
    assert found[1].id.endswith("page.md:serving:1")


def test_an_unknown_need_is_refused(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- needs: cluster -->\n```bash\nx\n```\n")
    with pytest.raises(ValueError, match="cluster"):
        blocks(page)


def test_console_commands_join_continuations_and_keep_the_shown_output():
    text = "$ eagleconv downgrade a \\\n    /tmp/b\neagleconv: error: a\n$ true\n"
    assert console_commands(text) == [("eagleconv downgrade a  /tmp/b", ["eagleconv: error: a"]), ("true", [])]


@pytest.mark.parametrize(("script", "ok"), [
    ("false  # exits 1: it fails\necho after", True),
    ("true  # exits 1: it fails\n", False),
    ("sh -c 'exit 2'  # exits 1\n", False),
    ("false\n", False),
    ("f() { return 1; }\nf \\\n  x  # exits 1\n", True),
])
def test_exits_comments_hold_the_command_to_its_status(script, ok):
    result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", expecting_exits(script)], capture_output=True)
    assert (result.returncode == 0) is ok, (expecting_exits(script), result.stderr)


def test_pip_install_is_taken_as_done():
    assert without_pip_install('pip install . && eagleconv x') == "true && eagleconv x"
    assert without_pip_install('pip install -e ".[test]"\necho y') == 'true \necho y'
