"""The generic registry: registration rules, prefix families, one-line errors that list the choices."""

import pytest

from robo_rl.core.config import ConfigError
from robo_rl.core.registry import Registry


def test_register_get_and_list_in_order():
    reg: Registry[int] = Registry("widget", field="widget.name")
    reg.register("b", 2)
    reg.register("a-1", 1)
    assert reg.get("b") == 2 and reg.get("a-1") == 1
    assert reg.names() == ("b", "a-1") and list(reg) == ["b", "a-1"] and len(reg) == 2 and "b" in reg


@pytest.mark.parametrize("name", ["", "Upper", "1abc", "a b", None])
def test_malformed_names_are_refused(name):
    with pytest.raises(ValueError, match="lower-case"):
        Registry("widget").register(name, 0)


def test_taken_name_and_wrong_type_are_refused():
    reg: Registry[int] = Registry("widget", entry_type=int)
    reg.register("a", 1)
    with pytest.raises(ValueError, match="already registered"):
        reg.register("a", 2)
    with pytest.raises(ValueError, match="expected a int, got str"):
        reg.register("b", "x")
    assert reg.get("a") == 1


def test_unknown_name_is_one_line_listing_every_choice():
    reg: Registry[int] = Registry("widget", field="widget.name")
    reg.register("a", 1)
    reg.register("b", 2)
    reg.register_prefix("ext:", lambda rest: len(rest), describes="id")
    with pytest.raises(ConfigError) as err:
        reg.get("c")
    assert str(err.value) == "config error: widget.name = 'c': unknown widget; valid: a, b, or ext:<id>"


def test_prefix_resolves_the_rest_of_the_name():
    reg: Registry[str] = Registry("widget")
    reg.register_prefix("ext:", lambda rest: rest.upper(), describes="id")
    assert reg.get("ext:abc") == "ABC"
    assert reg.prefixes() == {"ext:": "id"}
    with pytest.raises(ValueError, match="end with ':'"):
        reg.register_prefix("bad", str, describes="x")


def test_a_prefix_keeps_its_help_line():
    reg: Registry[str] = Registry("widget")
    reg.register_prefix("ext:", str, describes="id", help="an external widget, e.g. ext:knob")
    reg.register_prefix("bare:", str, describes="name")
    assert reg.prefix_help("ext:") == "an external widget, e.g. ext:knob" and reg.prefix_help("bare:") == ""
    with pytest.raises(KeyError):
        reg.prefix_help("other:")


def test_registered_is_undone_after_the_block_even_on_error():
    reg: Registry[int] = Registry("widget")
    with pytest.raises(RuntimeError), reg.registered("tmp", 1):
        assert reg.get("tmp") == 1
        raise RuntimeError
    assert "tmp" not in reg


def test_one_default_entry_names_the_default():
    reg: Registry[int] = Registry("widget")
    with pytest.raises(LookupError, match="no default widget"):
        _ = reg.default
    reg.register("a", 1)
    reg.register("b", 2, default=True)
    assert reg.default == "b"
    with pytest.raises(ValueError, match="the default is already 'b'"):
        reg.register("c", 3, default=True)
    assert "c" not in reg
    reg.unregister("b")
    with pytest.raises(LookupError):
        _ = reg.default
