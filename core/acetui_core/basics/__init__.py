"""What every part uses: the closed sets of names, errors, the parsing of what a user types, paths, resource samples, the lock on importing heavy libraries, the guard on every file written."""
