"""appliance.config: NATS config files and nats-server command-line flags -> typed ServerOptions.

The API `appliance run` and `appliance check-config` use:

* `load_config(path, *, pedantic=False, validate=True) -> ServerOptions` and
  `options_from_text(text, *, filename, ...)`: raise `appliance.errors.ConfigError` whose
  `problems` lists every problem as 'file:line:col: text'.
* `parse_run_args(argv) -> RunArgs`: nats-server's flags (`-p`, `-js`, `-sd=DIR`, `-DV`, ...).
* `apply_flags(options, run_args) -> ServerOptions`: a new options object, flags winning.
* `resolve_run_options(run_args, *, env=None, defaults=None) -> ServerOptions`: load (if `-c`,
  else `defaults`) + flags + checks.
* `embedded_default_options(data_dir=user_data_dir(os.environ))`: DESIGN §1's no-config default.
"""

from appliance.config.defaults import embedded_default_options, user_data_dir
from appliance.config.flags import RunArgs, apply_flags, parse_run_args, resolve_run_options
from appliance.config.load import load_config, options_from_text, validate_options
from appliance.config.options import ServerOptions

__all__ = [
    "RunArgs",
    "ServerOptions",
    "apply_flags",
    "embedded_default_options",
    "load_config",
    "options_from_text",
    "parse_run_args",
    "resolve_run_options",
    "user_data_dir",
    "validate_options",
]
