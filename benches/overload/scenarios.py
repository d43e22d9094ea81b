"""The overload scenarios: the backend's slots and service time, the lanes of traffic (rates as
multiples of the backend's capacity, slots / service time), and changes during the run.

Every scenario has load-balancer health checks: GET /healthz every 0.5 s, each on a new
connection, failed after 2 s without an answer.
"""

from dataclasses import dataclass, field

from load import Lane

HEALTH_PERIOD_S = 0.5
HEALTH_TIMEOUT_S = 2.0
CLIENT_TIMEOUT_S = 5.0
# connections the app lanes may hold open at once (below the 20,000 descriptors of a process)
MAX_CONNS = 6000


@dataclass
class LaneSpec:
    name: str  # normal | sheddable | critical
    path: str
    rate: list  # [(from_fraction_of_run, multiple_of_capacity or ("rps", n))]
    max_conns: int = MAX_CONNS
    timeout: float = CLIENT_TIMEOUT_S


@dataclass
class Scenario:
    name: str
    title: str
    lanes: list
    # 30 slots of 75 ms: a learned limit starts at 20 (weir's initial value) and must grow
    slots: int = 30
    service_ms: float = 75.0
    # backend changes: [(fraction_of_run, {"slots": 10} or {"service_ms": 100})]
    changes: list = field(default_factory=list)
    # also run through Caddy and tower (when built)
    all_hosts: bool = False

    @property
    def capacity(self):
        return self.slots * 1000.0 / self.service_ms

    def lanes_for(self, seconds):
        """load.Lane objects with absolute times and rates, the health checks last."""
        out = []
        for spec in self.lanes:
            rate = []
            for frac, mult in spec.rate:
                rps = mult[1] if isinstance(mult, tuple) else mult * self.capacity
                rate.append((frac * seconds, rps))
            out.append(Lane(spec.name, spec.path, rate, timeout=spec.timeout,
                            max_conns=spec.max_conns))
        out.append(Lane("health", "/healthz", [(0, 1 / HEALTH_PERIOD_S)],
                        timeout=HEALTH_TIMEOUT_S, fresh_conn=True))
        return out

    def changes_at(self, seconds):
        return [(frac * seconds, params) for frac, params in self.changes]

    def slots_service_at(self, t, seconds):
        slots, service = self.slots, self.service_ms
        for at, params in self.changes_at(seconds):
            if t >= at:
                slots = int(params.get("slots", slots))
                service = float(params.get("service_ms", service))
        return slots, service


NORMAL = "/w/Page_{n}"
TOOLS = "/w/Special:Tool/{n}"
CRITICAL = "/api/critical/{n}"


def all_scenarios():
    return [
        Scenario("steady-2x", "steady overload, 2x capacity",
                 [LaneSpec("normal", NORMAL, [(0, 2.0)])], all_hosts=True),
        Scenario("steady-4x", "steady overload, 4x capacity",
                 [LaneSpec("normal", NORMAL, [(0, 4.0)])], all_hosts=True),
        Scenario("capacity-halves", "1.5x load; slots 30 -> 15 at 1/3, back to 30 at 2/3",
                 [LaneSpec("normal", NORMAL, [(0, 1.5)])],
                 changes=[(1 / 3, {"slots": 15}), (2 / 3, {"slots": 30})]),
        Scenario("service-doubles", "1.5x load; service 75 -> 150 ms at 1/3, back at 2/3",
                 [LaneSpec("normal", NORMAL, [(0, 1.5)])],
                 changes=[(1 / 3, {"service_ms": 150}), (2 / 3, {"service_ms": 75})]),
        Scenario("one-rps", "1 request per second (no overload)",
                 [LaneSpec("normal", NORMAL, [(0, ("rps", 1.0))])]),
        Scenario("sheddable-spike",
                 "normal 0.5x + critical 0.25x; sheddable 0.1x spiking 10x from 1/3 to 2/3",
                 [LaneSpec("normal", NORMAL, [(0, 0.5)]),
                  LaneSpec("critical", CRITICAL, [(0, 0.25)]),
                  LaneSpec("sheddable", TOOLS, [(0, 0.1), (1 / 3, 1.0), (2 / 3, 0.1)])]),
        Scenario("incident",
                 "the incident: 1,000 client connections at 2.5x, 20 slots x 50 ms",
                 [LaneSpec("normal", NORMAL, [(0, 2.5)], max_conns=1000)], slots=20,
                 service_ms=50.0, all_hosts=True),
    ]


def by_name(names):
    known = {s.name: s for s in all_scenarios()}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown scenario(s) {unknown}; known: {', '.join(known)}")
    return [known[n] for n in names]
