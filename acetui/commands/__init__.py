"""The subcommands of ``acetui``, one module per topic; ``acetui.cli`` registers them."""
