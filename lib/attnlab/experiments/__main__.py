import sys

from attnlab.experiments._core import main

sys.exit(main())
