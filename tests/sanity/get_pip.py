"""What ansible-test runs in place of pypa's get-pip.py to put pip into a new virtualenv.

ansible-test downloads get-pip.py from ci-files.testing.ansible.com, which the test machines
cannot reach; it uses a file already in its cache instead, and this is that file. Python's
own ensurepip installs the pip it bundles, which then installs what ansible-test asked for
(the pinned pip and packages) from the package index.
"""

import subprocess
import sys

# get-pip.py's own options; pip install knows neither.
GET_PIP_ONLY = ("--no-setuptools", "--no-wheel")

# In a child process: ensurepip.bootstrap() in this one would set PIP_CONFIG_FILE=/dev/null
# for the install below too, and lose the machine's pip settings (its index, its CA).
subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"])
subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet",
                       *(arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY)])
