"""What a run is: its settings (the table of run settings), its typed records and its progress events."""
