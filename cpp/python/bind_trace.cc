// A recorder's events handed to Python (util/trace.h), which writes the timeline.

#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>

#include "bindings.h"

namespace insitubatch::python {

uint64_t TraceEvents(nb::handle value, uint64_t default_events) {
  if (PyBool_Check(value.ptr())) return value.ptr() == Py_True ? default_events : 0;
  if (PyObject* index = PyNumber_Index(value.ptr())) {
    int overflow = 0;
    const long long number = PyLong_AsLongLongAndOverflow(index, &overflow);
    Py_DECREF(index);
    if (overflow != 0 || number < 0) {
      ThrowIfError(InvalidArgument("trace must be True, False or a number of events, got " +
                                   nb::cast<std::string>(nb::str(value))));
    }
    ThrowIfError(CheckTraceEvents(static_cast<uint64_t>(number)));
    return static_cast<uint64_t>(number);
  }
  PyErr_Clear();
  const std::string message = "trace must be True, False or a number of events, got " +
                              nb::cast<std::string>(nb::repr(value)) + " (" +
                              nb::cast<std::string>(nb::str(value.type().attr("__name__"))) + ")";
  nb::object type_error = nb::module_::import_("insitubatch.errors").attr("InvalidTypeError");
  PyErr_SetObject(type_error.ptr(), nb::str(message.c_str()).ptr());
  throw nb::python_error();
}

void BindTrace(nb::module_& m) {
  m.def(
      "trace_events", [](nb::handle value) { return TraceEvents(value, TraceRecorder::kDefaultCapacity); },
      nb::arg("trace"),
      "The ring a run's `trace=` asks for: True -> the default number of events, False -> 0, a\n"
      "number within the recorder's limits -> itself; anything else is refused.");
}

nb::dict TraceToPython(const TraceRecorder& recorder, std::span<const std::string_view> kinds,
                       const std::vector<std::string>& sources) {
  TraceRecorder::Snapshot snap;
  {
    nb::gil_scoped_release release;
    snap = recorder.Take();
  }
  constexpr size_t kColumns = 9;
  const size_t n = snap.events.size();
  Buffer table = ValueOrThrow(Buffer::Allocate(std::max<size_t>(1, n * kColumns) * sizeof(int64_t)));
  auto* out = reinterpret_cast<int64_t*>(table.data());
  for (size_t i = 0; i < n; ++i) {
    const TraceEvent& e = snap.events[i];
    const int64_t row[kColumns] = {
        e.kind, e.source, e.thread, e.start, e.end, e.mid, e.id, static_cast<int64_t>(e.a), static_cast<int64_t>(e.b)};
    std::copy(row, row + kColumns, out + i * kColumns);
  }
  nb::dict d;
  d["columns"] = std::vector<std::string>{"kind", "source", "thread", "start", "end", "mid", "id", "a", "b"};
  d["events"] = BufferToNumpy(std::move(table), {n, kColumns}, zarr::DataType{zarr::DataTypeId::kInt64});
  d["recorded"] = snap.recorded;
  d["dropped"] = snap.dropped;
  d["capacity"] = snap.capacity;
  d["threads"] = snap.threads;
  std::vector<std::string> names(kinds.begin(), kinds.end());
  d["kinds"] = names;
  d["sources"] = sources;
  d["labels"] = snap.labels;
  return d;
}

}  // namespace insitubatch::python
