"""`python -m cftools` runs the command line (and so does `accelerate launch -m cftools eval ...`)."""

from cftools.cli import run

if __name__ == "__main__":
    run()
