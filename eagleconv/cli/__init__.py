"""The command line: a thin click layer over the library (``entry``: the executable; ``app``: the group and
error policy; ``commands``: the command set) and its rich rendering (``render*``).  Nothing below imports it."""
