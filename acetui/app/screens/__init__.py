"""The app's four screens: New run, Run, Results and Runs."""
