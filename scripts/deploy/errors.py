"""One base class, so the command line can report any step's failure in one line without a traceback."""


class DeployError(Exception):
    pass
