#pragma once

// Shared helpers of the bind_<topic>.cc files: the Status -> Python exception bridge and
// the numpy export of C++-owned buffers.

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "insitubatch/engine/order.h"
#include "insitubatch/util/buffer.h"
#include "insitubatch/util/result.h"
#include "insitubatch/util/trace.h"
#include "insitubatch/zarr/dtype.h"

namespace insitubatch::python {

namespace nb = nanobind;

// Thrown by ThrowIfError; the translator registered in bind_errors.cc maps the status
// code onto the class hierarchy of insitubatch.errors.
struct StatusException {
  Status status;
};

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) throw StatusException{status};
}

template <typename T>
T ValueOrThrow(Result<T> result) {
  if (!result.ok()) throw StatusException{std::move(result).status()};
  return std::move(result).value();
}

// Whether the interpreter is gone or finalizing: a thread that takes the GIL then is ended
// in place by Python (pthread_exit), and that unwinding through C++ frames aborts the
// process ("terminate called without an active exception").
inline bool InterpreterGone() {
#if PY_VERSION_HEX >= 0x030D0000
  return !Py_IsInitialized() || Py_IsFinalizing();
#else
  return !Py_IsInitialized() || _Py_IsFinalizing();
#endif
}

// Python's main thread (the one that finalizes), recorded at import.
inline unsigned long g_main_thread = 0;
inline void RecordMainThread() {
  g_main_thread = nb::cast<unsigned long>(nb::module_::import_("threading").attr("main_thread")().attr("ident"));
}

// Set by an atexit hook (lifecycle.py), before finalization begins: from then on a thread
// other than the main one never waits for the GIL, since one still waiting when
// finalization starts is ended in place.
inline std::atomic<bool> g_exiting{false};

inline bool IsMainThread() { return PyThread_get_thread_ident() == g_main_thread; }

// What another thread does instead of taking the GIL at exit (a daemon thread coming back
// from a wait): it waits, holding nothing, until the process ends. The main thread itself
// may always take it back.
inline void ParkIfFinalizing() {
  if (IsMainThread() || !(g_exiting.load() || InterpreterGone())) return;
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

// Releases the GIL for a blocking call; taking it back during finalization parks instead.
class GilRelease {
 public:
  GilRelease() : state_(PyEval_SaveThread()) {}
  ~GilRelease() {
    ParkIfFinalizing();
    PyEval_RestoreThread(state_);
  }
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;

 private:
  PyThreadState* state_;
};

// Runs the signal handlers from a thread that released the GIL (Ctrl-C while it waits):
// true when one raised, with the exception pending for nb::python_error(). Python runs
// handlers on the main thread only, so other threads never take the GIL for this.
inline bool SignalRaised() {
  if (!IsMainThread() || InterpreterGone()) return false;
  nb::gil_scoped_acquire gil;
  return PyErr_CheckSignals() != 0;
}

nb::dlpack::dtype ToDlpackDtype(zarr::DataType dtype);
// The numpy shape of `shape` items of `dtype`: a record type adds an axis of its bytes.
std::vector<size_t> NumpyDims(const std::vector<uint64_t>& shape, zarr::DataType dtype);

// A numpy array viewing `buffer` with `shape`; the array owns the buffer (freed when the
// last Python reference goes), so no copy is made.
nb::object BufferToNumpy(Buffer buffer, const std::vector<uint64_t>& shape, zarr::DataType dtype);

// An epoch order handed over from Python: rows (N, 2) of [chunk, within] and block_start
// (non-decreasing from 0 to N); InvalidArgumentError otherwise (bind_order.cc).
using Int64Array = nb::ndarray<const int64_t, nb::c_contig, nb::device::cpu>;
engine::EpochOrder OrderFromArrays(const Int64Array& rows, const Int64Array& block_start);

// What `recorder` holds now, for Python to write as a timeline: {"events": int64 array
// (N, 9) of the "columns" (kind, source, thread, start, end, mid, id, a, b), "recorded",
// "dropped", "capacity", "threads": [(thread, name)], "kinds": the kinds' names by value,
// "sources": the names of the `source` indexes, "labels": the recorder's labels by number}
// (bind_trace.cc).
nb::dict TraceToPython(const TraceRecorder& recorder, std::span<const std::string_view> kinds,
                       const std::vector<std::string>& sources);
// `trace=` as given: True (`default_events`), False or 0 (none), or a number of events the
// recorder accepts (CheckTraceEvents); anything else is refused, naming the argument.
uint64_t TraceEvents(nb::handle value, uint64_t default_events);

void BindErrors(nb::module_& m);
void BindStores(nb::module_& m);
void BindCloudStores(nb::module_& m);
void BindPythonStore(nb::module_& m);
void BindZarr(nb::module_& m);
void BindBuildInfo(nb::module_& m);
void BindEngine(nb::module_& m);
void BindStats(nb::module_& m);       // engine::PassStats and its parts, read-only (bind_stats.cc)
void BindTransforms(nb::module_& m);  // NativeTransform and its factories (bind_transforms.cc)
void BindBench(nb::module_& m);
void BindOrder(nb::module_& m);
void BindSizing(nb::module_& m);
void BindCache(nb::module_& m);
void BindPrefetch(nb::module_& m);
void BindTrace(nb::module_& m);  // trace_events(), the rule every `trace=` is read by (bind_trace.cc)

}  // namespace insitubatch::python
