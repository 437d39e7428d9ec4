"""The names the plugin gives users, which the fixtures and the helpers both use."""

TIME_SKIPPING_MARK = "coord_time_skipping"
"""A test marked so gets `coord` and `coord_worker` on the time-skipping server."""
DYNAMIC_CONFIG_INI = "coord_dynamic_config"
"""The pytest configuration's list of the session dev server's dynamic config (`key=value`)."""
