"""ocw's version, in a module of its own: the store writes it into the files it
marks, and the store sits below the package root, which imports the layers."""
__version__ = "0.2.0"
