"""Prints what berm-vmm measured before the guest ran, from one run's JSON lines (its stderr,
or <run-dir>/vmm.jsonl): the `hypervisor` choice and the `measurements` line. For scripts/demo.

    python3 measurements.py VMM_JSONL [hypervisor]
"""

import json
import sys


def lines(path):
    with open(path) as f:
        for line in f:
            try:
                yield json.loads(line)
            except ValueError:
                continue


def main():
    path, *what = sys.argv[1:]
    for value in lines(path):
        if what == ["hypervisor"] and value.get("event") == "hypervisor":
            print(f"{value['chosen']} / {value.get('accel') or '-'}")
            return
        if not what and value.get("event") == "measurements":
            kernel, rootfs = value["kernel"], value["rootfs"]
            print(f"  kernel   sha256:{kernel['sha256']}  pinned={kernel['pinned']}")
            print(f"  cmdline  {kernel['cmdline']}")
            print(f"  rootfs   sha256:{rootfs['sha256']}  pinned={rootfs['pinned']}")
            state = value.get("state")
            if state:
                print(f"  state    chunked sha256:{state.get('chunked_sha256')}  (before the guest wrote to it)")
            for app in value.get("apps", []):
                print(f"  app {app['index']}    {app['name']}  sha256:{app['sha256']}")
                for program in app.get("programs", []):
                    print(f"           program {program.get('name')}  sha256:{program.get('sha256')}")
                for code in app.get("code", []):
                    print(f"           code    {code.get('program')}  sha256:{code.get('sha256')}")
            return
    sys.exit(f"measurements: no {' '.join(what) or 'measurements'} line in {path}")


if __name__ == "__main__":
    main()
