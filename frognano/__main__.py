import sys

from frognano.cli import main

sys.exit(main())
