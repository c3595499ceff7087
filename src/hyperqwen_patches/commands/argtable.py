"""Generated from the Typer app by ``hyperqwen_patches.cli.write_argtable()``: do not edit.

The fast path (``commands/argv.py``) reads command lines with it; ``tests/test_argv.py`` fails
when it no longer matches the commands."""

from __future__ import annotations

TYPE_CHECKING = False  # typing itself is not imported by a plain run
if TYPE_CHECKING:
    from typing import Any

# fmt: off
TABLE: dict[str, dict[str, Any]] = {
    "check": {
        "module": "hyperqwen_patches.commands.check",
        "function": "check_command",
        "no_args_is_help": False,
        "params": [
            {"name": "repo", "kind": "option", "opts": ["--repo"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
            {"name": "source", "kind": "option", "opts": ["--source"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "str"},
            {"name": "max_offset", "kind": "option", "opts": ["--max-offset"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "int", "min": 0, "max": None},
            {"name": "fork", "kind": "option", "opts": ["--fork"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "str"},
            {"name": "export_point", "kind": "option", "opts": ["--export-point"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "str"},
            {"name": "json_output", "kind": "option", "opts": ["--json"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "require_fork", "kind": "option", "opts": ["--require-fork"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
        ],
    },
    "apply": {
        "module": "hyperqwen_patches.commands.apply",
        "function": "apply_command",
        "no_args_is_help": False,
        "params": [
            {"name": "directory", "kind": "argument", "opts": [], "secondary": [], "flag": False, "multiple": False, "required": True, "type": "path", "exists": False, "file_okay": True, "dir_okay": True, "readable": True},
            {"name": "patch", "kind": "option", "opts": ["--patch"], "secondary": [], "flag": False, "multiple": True, "required": False, "type": "path", "exists": False, "file_okay": True, "dir_okay": True, "readable": True},
            {"name": "dry_run", "kind": "option", "opts": ["--dry-run"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "json_output", "kind": "option", "opts": ["--json"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "max_offset", "kind": "option", "opts": ["--max-offset"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "int", "min": 0, "max": None},
            {"name": "exact", "kind": "option", "opts": ["--exact"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "strict", "kind": "option", "opts": ["--strict"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "repo", "kind": "option", "opts": ["--repo"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
            {"name": "upto", "kind": "option", "opts": ["--upto"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "str"},
            {"name": "check_applied", "kind": "option", "opts": ["--check-applied"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
        ],
    },
    "status": {
        "module": "hyperqwen_patches.commands.status",
        "function": "status_command",
        "no_args_is_help": False,
        "params": [
            {"name": "directory", "kind": "argument", "opts": [], "secondary": [], "flag": False, "multiple": False, "required": True, "type": "path", "exists": False, "file_okay": True, "dir_okay": True, "readable": True},
            {"name": "repo", "kind": "option", "opts": ["--repo"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
            {"name": "json_output", "kind": "option", "opts": ["--json"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
        ],
    },
    "unapply": {
        "module": "hyperqwen_patches.commands.status",
        "function": "unapply_command",
        "no_args_is_help": False,
        "params": [
            {"name": "directory", "kind": "argument", "opts": [], "secondary": [], "flag": False, "multiple": False, "required": True, "type": "path", "exists": False, "file_okay": True, "dir_okay": True, "readable": True},
            {"name": "repo", "kind": "option", "opts": ["--repo"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
            {"name": "to", "kind": "option", "opts": ["--to"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "str"},
            {"name": "dry_run", "kind": "option", "opts": ["--dry-run"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "json_output", "kind": "option", "opts": ["--json"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
        ],
    },
    "list": {
        "module": "hyperqwen_patches.commands.list_",
        "function": "list_command",
        "no_args_is_help": False,
        "params": [
            {"name": "repo", "kind": "option", "opts": ["--repo"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
            {"name": "json_output", "kind": "option", "opts": ["--json"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
        ],
    },
    "edit": {
        "module": "hyperqwen_patches.commands.rows",
        "function": "edit_command",
        "no_args_is_help": False,
        "params": [
            {"name": "row", "kind": "argument", "opts": [], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "str"},
            {"name": "abort", "kind": "option", "opts": ["--abort"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "fork", "kind": "option", "opts": ["--fork"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
            {"name": "repo", "kind": "option", "opts": ["--repo"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
        ],
    },
    "refresh": {
        "module": "hyperqwen_patches.commands.rows",
        "function": "refresh_command",
        "no_args_is_help": False,
        "params": [
            {"name": "fork", "kind": "option", "opts": ["--fork"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
            {"name": "repo", "kind": "option", "opts": ["--repo"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
            {"name": "close", "kind": "option", "opts": ["--close"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
        ],
    },
    "new": {
        "module": "hyperqwen_patches.commands.rows",
        "function": "new_command",
        "no_args_is_help": False,
        "params": [
            {"name": "name", "kind": "argument", "opts": [], "secondary": [], "flag": False, "multiple": False, "required": True, "type": "str"},
            {"name": "after", "kind": "option", "opts": ["--after"], "secondary": [], "flag": False, "multiple": False, "required": True, "type": "str"},
            {"name": "what", "kind": "option", "opts": ["--what"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "str"},
            {"name": "kind", "kind": "option", "opts": ["--kind"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "str"},
            {"name": "fork", "kind": "option", "opts": ["--fork"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
            {"name": "repo", "kind": "option", "opts": ["--repo"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
        ],
    },
    "drop": {
        "module": "hyperqwen_patches.commands.rows",
        "function": "drop_command",
        "no_args_is_help": False,
        "params": [
            {"name": "row", "kind": "argument", "opts": [], "secondary": [], "flag": False, "multiple": False, "required": True, "type": "str"},
            {"name": "retired_by", "kind": "option", "opts": ["--retired-by"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "str"},
            {"name": "fork", "kind": "option", "opts": ["--fork"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
            {"name": "repo", "kind": "option", "opts": ["--repo"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
        ],
    },
    "move": {
        "module": "hyperqwen_patches.commands.rows",
        "function": "move_command",
        "no_args_is_help": False,
        "params": [
            {"name": "row", "kind": "argument", "opts": [], "secondary": [], "flag": False, "multiple": False, "required": True, "type": "str"},
            {"name": "after", "kind": "option", "opts": ["--after"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "str"},
            {"name": "before", "kind": "option", "opts": ["--before"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "str"},
            {"name": "fork", "kind": "option", "opts": ["--fork"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
            {"name": "repo", "kind": "option", "opts": ["--repo"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
        ],
    },
    "rename": {
        "module": "hyperqwen_patches.commands.rows",
        "function": "rename_command",
        "no_args_is_help": False,
        "params": [
            {"name": "old", "kind": "argument", "opts": [], "secondary": [], "flag": False, "multiple": False, "required": True, "type": "str"},
            {"name": "new", "kind": "argument", "opts": [], "secondary": [], "flag": False, "multiple": False, "required": True, "type": "str"},
            {"name": "fork", "kind": "option", "opts": ["--fork"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
            {"name": "repo", "kind": "option", "opts": ["--repo"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
        ],
    },
    "adopt": {
        "module": "hyperqwen_patches.commands.adopt",
        "function": "adopt_command",
        "no_args_is_help": False,
        "params": [
            {"name": "series_file", "kind": "argument", "opts": [], "secondary": [], "flag": False, "multiple": False, "required": True, "type": "path", "exists": False, "file_okay": True, "dir_okay": True, "readable": True},
            {"name": "pin", "kind": "option", "opts": ["--pin"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "str"},
            {"name": "append", "kind": "option", "opts": ["--append"], "secondary": [], "flag": False, "multiple": True, "required": False, "type": "path", "exists": False, "file_okay": True, "dir_okay": True, "readable": True},
            {"name": "modules", "kind": "option", "opts": ["--modules"], "secondary": [], "flag": False, "multiple": True, "required": False, "type": "path", "exists": False, "file_okay": True, "dir_okay": True, "readable": True},
            {"name": "into", "kind": "option", "opts": ["--into"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
            {"name": "package", "kind": "option", "opts": ["--package"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "str"},
            {"name": "source", "kind": "option", "opts": ["--source"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "str"},
            {"name": "runtime_knob", "kind": "option", "opts": ["--runtime-knob"], "secondary": [], "flag": False, "multiple": True, "required": False, "type": "str"},
            {"name": "force", "kind": "option", "opts": ["--force"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "dry_run", "kind": "option", "opts": ["--dry-run"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "json_output", "kind": "option", "opts": ["--json"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
        ],
    },
    "render": {
        "module": "hyperqwen_patches.commands.render",
        "function": "render_command",
        "no_args_is_help": False,
        "params": [
            {"name": "repo", "kind": "option", "opts": ["--repo"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
            {"name": "check", "kind": "option", "opts": ["--check"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "json_output", "kind": "option", "opts": ["--json"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
        ],
    },
    "export": {
        "module": "hyperqwen_patches.commands.export",
        "function": "export_command",
        "no_args_is_help": False,
        "params": [
            {"name": "fork", "kind": "option", "opts": ["--fork"], "secondary": [], "flag": False, "multiple": False, "required": True, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
            {"name": "repo", "kind": "option", "opts": ["--repo"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
            {"name": "export_point", "kind": "option", "opts": ["--export-point"], "secondary": [], "flag": False, "multiple": True, "required": False, "type": "str"},
            {"name": "check", "kind": "option", "opts": ["--check"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "json_output", "kind": "option", "opts": ["--json"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "bundle", "kind": "option", "opts": ["--bundle"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
        ],
    },
    "import": {
        "module": "hyperqwen_patches.commands.import_",
        "function": "import_command",
        "no_args_is_help": False,
        "params": [
            {"name": "into", "kind": "option", "opts": ["--into"], "secondary": [], "flag": False, "multiple": False, "required": True, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
            {"name": "repo", "kind": "option", "opts": ["--repo"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
            {"name": "export_point", "kind": "option", "opts": ["--export-point"], "secondary": [], "flag": False, "multiple": True, "required": False, "type": "str"},
            {"name": "source", "kind": "option", "opts": ["--source"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "str"},
            {"name": "create", "kind": "option", "opts": ["--create"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "force", "kind": "option", "opts": ["--force"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "json_output", "kind": "option", "opts": ["--json"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
        ],
    },
    "diff": {
        "module": "hyperqwen_patches.commands.diff",
        "function": "diff",
        "no_args_is_help": True,
        "params": [
            {"name": "old", "kind": "argument", "opts": [], "secondary": [], "flag": False, "multiple": False, "required": True, "type": "str"},
            {"name": "new", "kind": "argument", "opts": [], "secondary": [], "flag": False, "multiple": False, "required": True, "type": "str"},
            {"name": "repo", "kind": "option", "opts": ["--repo"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": True, "dir_okay": True, "readable": True},
            {"name": "as_json", "kind": "option", "opts": ["--json"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "interdiff", "kind": "option", "opts": ["--interdiff"], "secondary": ["--no-interdiff"], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "exit_code", "kind": "option", "opts": ["--exit-code"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
        ],
    },
    "port": {
        "module": "hyperqwen_patches.commands.port",
        "function": "port",
        "no_args_is_help": True,
        "params": [
            {"name": "to", "kind": "option", "opts": ["--to"], "secondary": [], "flag": False, "multiple": True, "required": False, "type": "str"},
            {"name": "repo", "kind": "option", "opts": ["--repo"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
            {"name": "source", "kind": "option", "opts": ["--source"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "str"},
            {"name": "from_source", "kind": "option", "opts": ["--from-source"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "str"},
            {"name": "as_json", "kind": "option", "opts": ["--json"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "markdown", "kind": "option", "opts": ["--markdown"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": True, "dir_okay": True, "readable": True},
            {"name": "diffs", "kind": "option", "opts": ["--diffs"], "secondary": ["--no-diffs"], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "rebase", "kind": "option", "opts": ["--rebase"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "fork", "kind": "option", "opts": ["--fork"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": True, "dir_okay": True, "readable": True},
            {"name": "branch", "kind": "option", "opts": ["--branch"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "str"},
            {"name": "force", "kind": "option", "opts": ["--force"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "worktree", "kind": "option", "opts": ["--worktree"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": True, "dir_okay": True, "readable": True},
            {"name": "resume", "kind": "option", "opts": ["--continue"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "skip", "kind": "option", "opts": ["--skip"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "abort", "kind": "option", "opts": ["--abort"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
        ],
    },
    "statics": {
        "module": "hyperqwen_patches.commands.statics",
        "function": "statics",
        "no_args_is_help": False,
        "params": [
            {"name": "to", "kind": "option", "opts": ["--to"], "secondary": [], "flag": False, "multiple": True, "required": False, "type": "str"},
            {"name": "repo", "kind": "option", "opts": ["--repo"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": False, "dir_okay": True, "readable": True},
            {"name": "source", "kind": "option", "opts": ["--source"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "str"},
            {"name": "as_json", "kind": "option", "opts": ["--json"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "markdown", "kind": "option", "opts": ["--markdown"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "path", "exists": False, "file_okay": True, "dir_okay": True, "readable": True},
        ],
    },
    "cache": {
        "module": "hyperqwen_patches.commands.cache",
        "function": "cache_command",
        "no_args_is_help": False,
        "params": [
            {"name": "prune", "kind": "option", "opts": ["--prune"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "days", "kind": "option", "opts": ["--days"], "secondary": [], "flag": False, "multiple": False, "required": False, "type": "int", "min": 0, "max": None},
            {"name": "dry_run", "kind": "option", "opts": ["--dry-run"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
            {"name": "json_output", "kind": "option", "opts": ["--json"], "secondary": [], "flag": True, "multiple": False, "required": False, "type": "bool"},
        ],
    },
}
