# Role: guest side of vm_doctor (run by /init with bash inside the Soft-RoCE guest): rdmasock
# doctor finds rxe0/rxe1 with active ports, GIDs and their netdev addresses, reports the
# (unlimited) memlock limit, and probes services over rdma_cm: a preloaded verbs listener
# answers, a port without listener does not.
#
# Env (from test_vm_doctor.sh): RSK_CLI (the rdmasock command), RSK_LIB, RSK_ECHO (echo_server).
# shellcheck source=../guest-lib.sh
. /rsk/guest-lib.sh
export RDMASOCK_LIBRARY=$RSK_LIB

has() { # PATTERN FILE
	grep -qE "$1" "$2" || {
		echo "missing /$1/ in:" >&2
		cat "$2" >&2
		return 1
	}
}

sc_devices() {
	local rc
	"$RSK_CLI" doctor >/tmp/doctor.out
	rc=$?
	cat /tmp/doctor.out
	has "^OK   rdma-devices: 2: rxe0 rxe1$" /tmp/doctor.out &&
		has "^OK   port rxe0/1: PORT_ACTIVE, [1-9][0-9]* GIDs, netdev veth0 192.0.2.1" /tmp/doctor.out &&
		has "^OK   port rxe1/1: PORT_ACTIVE, [1-9][0-9]* GIDs, netdev veth1 192.0.2.2" /tmp/doctor.out &&
		has "^OK   memlock: unlimited; 64 verbs connections need 32.0 MiB" /tmp/doctor.out &&
		[ "$rc" = 0 ] || { echo "doctor exited $rc, want 0" >&2; return 1; }
}

sc_service() {
	local pid rc
	RDMASOCK_TRANSPORT=verbs LD_PRELOAD=$RSK_LIB RSK_TEST_ADDR=$RSK_ADDR2 "$RSK_ECHO" 7301 &
	pid=$!
	wait_port_addr "$RSK_ADDR2" 7301 10 || return 1
	sleep 0.5 # the rdma_cm listener is set up right after listen()
	"$RSK_CLI" doctor "$RSK_ADDR2:7301" >/tmp/svc.out
	rc=$?
	"$RSK_CLI" doctor "$RSK_ADDR2:7302" >/tmp/none.out
	kill "$pid"
	wait "$pid"
	cat /tmp/svc.out /tmp/none.out
	has "^OK   service: $RSK_ADDR2:7301: listener is preloaded" /tmp/svc.out &&
		has "^OK   rdma_cm: $RSK_ADDR2:7301: reachable; an rdma_cm listener answered" /tmp/svc.out &&
		has "^FAIL service: $RSK_ADDR2:7302: nothing listens" /tmp/none.out &&
		has "^WARN rdma_cm: $RSK_ADDR2:7302: reachable over RDMA, but no rdma_cm listener" /tmp/none.out &&
		[ "$rc" = 0 ] || { echo "doctor of the service exited $rc, want 0" >&2; return 1; }
}

scenario doctor_devices sc_devices
scenario doctor_service sc_service
rsk_summary
