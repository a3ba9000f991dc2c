package apf

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-cp/meridian/lib/telemetry"
)

// metrics are the flow-control metrics, with Kubernetes' names and labels.
type metrics struct {
	executingSeats *prometheus.GaugeVec     // priority_level, flow_schema
	inQueue        *prometheus.GaugeVec     // priority_level, flow_schema
	rejected       *prometheus.CounterVec   // priority_level, flow_schema, reason
	dispatched     *prometheus.CounterVec   // priority_level, flow_schema
	wait           *prometheus.HistogramVec // priority_level, flow_schema, execute
	execution      *prometheus.HistogramVec // priority_level, flow_schema
	nominalLimit   *prometheus.GaugeVec     // priority_level
	currentLimit   *prometheus.GaugeVec     // priority_level
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		// Collect into a private registry nobody gathers.
		reg = prometheus.NewRegistry()
	}
	var (
		m    metrics
		err  error
		errs []error
	)
	pf := []string{"priority_level", "flow_schema"}
	m.executingSeats, err = telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "apiserver_flowcontrol_current_executing_seats",
		Help: "Concurrency (number of seats) occupied by the currently executing (initial stage for a WATCH, any stage otherwise) requests in the API Priority and Fairness subsystem",
	}, pf))
	errs = append(errs, err)
	m.inQueue, err = telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "apiserver_flowcontrol_current_inqueue_requests",
		Help: "Number of requests currently pending in queues of the API Priority and Fairness subsystem",
	}, pf))
	errs = append(errs, err)
	m.rejected, err = telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "apiserver_flowcontrol_rejected_requests_total",
		Help: "Number of requests rejected by API Priority and Fairness subsystem",
	}, append(pf, "reason")))
	errs = append(errs, err)
	m.dispatched, err = telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "apiserver_flowcontrol_dispatched_requests_total",
		Help: "Number of requests executed by API Priority and Fairness subsystem",
	}, pf))
	errs = append(errs, err)
	m.wait, err = telemetry.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "apiserver_flowcontrol_request_wait_duration_seconds",
		Help:    "Length of time a request spent waiting in its queue",
		Buckets: []float64{0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30},
	}, append(pf, "execute")))
	errs = append(errs, err)
	m.execution, err = telemetry.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "apiserver_flowcontrol_request_execution_seconds",
		Help:    "Duration of initial stage (for a WATCH) or any (for a non-WATCH) stage of request execution in the API Priority and Fairness subsystem",
		Buckets: []float64{0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30},
	}, pf))
	errs = append(errs, err)
	m.nominalLimit, err = telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "apiserver_flowcontrol_nominal_limit_seats",
		Help: "Nominal number of execution seats configured for each priority level",
	}, []string{"priority_level"}))
	errs = append(errs, err)
	m.currentLimit, err = telemetry.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "apiserver_flowcontrol_current_limit_seats",
		Help: "current derived number of execution seats available to each priority level",
	}, []string{"priority_level"}))
	errs = append(errs, err)
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return &m, nil
}

// flowMetrics are the series of one priority level and flow schema,
// looked up once (level.flowMetrics) instead of by label values on each
// request.
type flowMetrics struct {
	executingSeats, inQueue   prometheus.Gauge
	dispatched                prometheus.Counter
	waitExecuted, waitDropped prometheus.Observer
	execution                 prometheus.Observer
}

func (m *metrics) newFlowMetrics(level, schema string) *flowMetrics {
	return &flowMetrics{
		executingSeats: m.executingSeats.WithLabelValues(level, schema),
		inQueue:        m.inQueue.WithLabelValues(level, schema),
		dispatched:     m.dispatched.WithLabelValues(level, schema),
		waitExecuted:   m.wait.WithLabelValues(level, schema, "true"),
		waitDropped:    m.wait.WithLabelValues(level, schema, "false"),
		execution:      m.execution.WithLabelValues(level, schema),
	}
}

// observeWait records a request's queue wait: executed, or rejected or
// cancelled.
func (f *flowMetrics) observeWait(executed bool, d time.Duration) {
	if executed {
		f.waitExecuted.Observe(d.Seconds())
		return
	}
	f.waitDropped.Observe(d.Seconds())
}
