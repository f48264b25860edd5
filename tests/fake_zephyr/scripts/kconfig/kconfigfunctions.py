"""Stand-in for Zephyr's scripts/kconfig/kconfigfunctions.py (tests only):
the Kconfig preprocessor functions the generated Kconfig calls, with
Zephyr's names, arguments and results, over a devicetree the test
describes. kconfiglib imports this module (by its name, from sys.path)
while it parses.

CHOSEN: /chosen property -> whether the node it points to is enabled
("okay"); a property not listed is absent from /chosen.
"""

CHOSEN: dict[str, bool] = {}


def dt_chosen_enabled(kconf, _name, chosen):
    """"y" if /chosen has the property and its node is enabled, else "n"."""
    return "y" if CHOSEN.get(chosen, False) else "n"


functions = {
    "dt_chosen_enabled": (dt_chosen_enabled, 1, 1),
}
