// Bridge to Python stores: a native Store that forwards every read to a zarr-python v3
// Store object (MemoryStore, LocalStore, FsspecStore, an Icechunk session store, ...).
//
// The reads run as coroutines on the private asyncio loop of insitubatch/bridge.py. C++
// holds the GIL only to schedule a read (ReadAsync returns at once) and, on the loop
// thread, to copy the returned bytes out; the read's callback always runs with the GIL
// released, so the engine's IO and decode threads never wait on Python.

#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "insitubatch/io/store.h"

namespace insitubatch::python {
namespace {

// Set by bridge.py's atexit hook: from then on reads fail fast instead of queueing work on
// a loop that is being torn down.
std::atomic<bool> g_bridge_closed{false};

// Whether this thread may take the GIL to start work. A thread that takes the GIL while
// the interpreter finalizes is terminated in place, so such reads end Cancelled instead.
bool BridgeUsable() { return !g_bridge_closed.load(std::memory_order_acquire) && !InterpreterGone(); }

Status BridgeClosed(const std::string& where) {
  return Cancelled("reading " + where + ": the Python store bridge is shut down (interpreter exiting)");
}

// Drops Python references from any thread: under the GIL when that is safe, otherwise
// (the interpreter is gone or finalizing) leaks them, which is all that is left to do.
void DropReferences(std::initializer_list<nb::object*> objects) {
  if (!Py_IsInitialized()) {
    for (nb::object* o : objects) o->release();
    return;
  }
  if (PyGILState_Check()) {
    for (nb::object* o : objects) o->reset();
    return;
  }
  if (InterpreterGone()) {
    for (nb::object* o : objects) o->release();
    return;
  }
  nb::gil_scoped_acquire gil;
  for (nb::object* o : objects) o->reset();
}

// One read in flight. Its Python object travels with the coroutine on the loop, so the
// engine's callback lives exactly as long as Python may still report an outcome.
class BridgeRead {
 public:
  BridgeRead(ReadCallback done, ByteRange range, std::string where, CancelRef cancel)
      : done_(std::move(done)), range_(range), where_(std::move(where)), cancel_(std::move(cancel)) {}
  BridgeRead(const BridgeRead&) = delete;
  BridgeRead& operator=(const BridgeRead&) = delete;

  // A read Python dropped without an outcome (its task was destroyed) still ends.
  ~BridgeRead() {
    if (done_)
      Complete(Cancelled("reading " + where_ + range_.Describe() + ": the read was dropped before it finished"));
  }

  // Runs the callback once; later outcomes are ignored. Called with or without the GIL.
  void Complete(Result<ReadResult> result) {
    ReadCallback done = std::exchange(done_, nullptr);
    if (!done) return;
    if (Py_IsInitialized() && PyGILState_Check() && !InterpreterGone()) {
      nb::gil_scoped_release release;
      done(std::move(result));
    } else {
      done(std::move(result));
    }
  }

  // The store's bytes (any C-contiguous buffer object): copied out, then checked against
  // the requested range exactly as the native stores check theirs.
  void Found(nb::handle data) {
    Py_buffer view;
    if (PyObject_GetBuffer(data.ptr(), &view, PyBUF_SIMPLE) != 0) {
      PyErr_Clear();
      Complete(IoError("reading " + where_ + range_.Describe() +
                       ": the store returned a value that is not a contiguous byte buffer"));
      return;
    }
    Result<ReadResult> result = [&]() -> Result<ReadResult> {
      // The exported view pins the object, so the copy needs no GIL.
      nb::gil_scoped_release release;
      return CopyChecked(std::span(static_cast<const std::byte*>(view.buf), static_cast<size_t>(view.len)));
    }();
    PyBuffer_Release(&view);
    Complete(std::move(result));
  }

  void Missing() { Complete(ReadResult::Missing()); }
  // Whoever started the read gave up on it: the bridge cancels its coroutine.
  bool CancelRequested() const { return IsCancelled(cancel_); }
  void Fail(const std::string& why) { Complete(IoError("reading " + where_ + range_.Describe() + ": " + why)); }
  void Cancel(const std::string& why) { Complete(Cancelled("reading " + where_ + range_.Describe() + ": " + why)); }

 private:
  Result<ReadResult> CopyChecked(std::span<const std::byte> bytes) const {
    auto wrong_size = [&](const char* what) {
      return DataLoss("reading " + where_ + range_.Describe() + ": the store returned " + std::to_string(bytes.size()) +
                      " bytes, " + what);
    };
    switch (range_.kind) {
      case ByteRange::Kind::kAll:
        break;
      case ByteRange::Kind::kRange:
        // Short means the object ends inside the range (truncated); long is a store bug.
        if (bytes.size() != range_.length) return wrong_size("not the range's length");
        break;
      case ByteRange::Kind::kSuffix:
        if (bytes.size() < range_.length) return wrong_size("fewer than the suffix asks for");
        bytes = bytes.subspan(bytes.size() - range_.length);  // some stores ignore suffix 0
        break;
      default:
        return InvalidArgument("reading " + where_ + ": unknown byte range kind");
    }
    INSITU_ASSIGN_OR_RETURN(Buffer copy, Buffer::CopyOf(bytes));
    ReadResult result;
    result.found = true;
    result.data = std::move(copy);
    return result;
  }

  ReadCallback done_;
  ByteRange range_;
  std::string where_;
  CancelRef cancel_;
};

// "ValueError: message" from the exception a Python call raised (no traceback).
std::string DescribePythonError(const nb::python_error& e) {
  try {
    std::string type = nb::cast<std::string>(nb::handle(e.type()).attr("__qualname__"));
    std::string message = nb::cast<std::string>(nb::str(e.value()));
    return message.empty() ? type : type + ": " + message;
  } catch (...) {
    return "a Python exception";
  }
}

class PythonStore;

// Every live PythonStore, so the exit hook can drop their Python references: a store object
// whose module also holds the dataset forms a cycle through C++ that Python's GC cannot see.
std::mutex g_stores_mutex;
std::set<PythonStore*> g_stores;

class PythonStore final : public Store {
 public:
  // `submit(store, key, kind, offset, length, read)` schedules one read on the bridge loop;
  // `list_keys(store, prefix)` lists on it and blocks. Both come from bridge.py.
  PythonStore(nb::object store, std::string location, nb::object submit, nb::object list_keys)
      : store_(std::move(store)),
        location_(std::move(location)),
        submit_(std::move(submit)),
        list_keys_(std::move(list_keys)) {
    std::lock_guard lock(g_stores_mutex);
    g_stores.insert(this);
  }

  ~PythonStore() override {
    {
      std::lock_guard lock(g_stores_mutex);
      g_stores.erase(this);
    }
    DropReferences({&store_, &submit_, &list_keys_});
  }

  // At exit, with the GIL held and the bridge closed: no read touches these again.
  void DropPythonReferences() {
    store_.reset();
    submit_.reset();
    list_keys_.reset();
  }

  using Store::ReadAsync;
  void ReadAsync(std::string key, ByteRange range, ReadCallback done, CancelRef cancel) override {
    if (Status status = ValidateKey(key); !status.ok()) {
      done(std::move(status));
      return;
    }
    auto read = std::make_unique<BridgeRead>(std::move(done), range, Describe(key), std::move(cancel));
    if (!BridgeUsable()) {
      read->Complete(BridgeClosed(Describe(key)));
      return;
    }
    BridgeRead* raw = read.get();
    nb::gil_scoped_acquire gil;
    // Checked again under the GIL: the exit hook drops store_ while holding it.
    if (g_bridge_closed.load(std::memory_order_acquire)) {
      raw->Complete(BridgeClosed(Describe(key)));
      return;
    }
    // Outside the try: if submit raises, the read must outlive the catch that fails it.
    nb::object handle;
    try {
      handle = nb::cast(raw, nb::rv_policy::take_ownership);
      read.release();  // Python owns it now
      const int kind = static_cast<int>(range.kind);
      submit_(store_, nb::str(key.data(), key.size()), kind, range.offset, range.length, handle);
    } catch (const nb::python_error& e) {
      raw->Fail("could not schedule the read: " + DescribePythonError(e));
    } catch (const std::exception& e) {
      raw->Fail(std::string("could not schedule the read: ") + e.what());
    }
  }

  Result<std::vector<std::string>> List(std::string_view prefix) override {
    if (!BridgeUsable()) return BridgeClosed(Describe(prefix));
    nb::gil_scoped_acquire gil;
    if (g_bridge_closed.load(std::memory_order_acquire)) return BridgeClosed(Describe(prefix));
    std::vector<std::string> keys;
    try {
      // list_keys waits on the loop in Python, which drops the GIL while it waits.
      nb::object listed = list_keys_(store_, nb::str(prefix.data(), prefix.size()));
      for (nb::handle key : listed) {
        std::string k = nb::cast<std::string>(key);
        if (k.starts_with(prefix)) keys.push_back(std::move(k));
      }
    } catch (const nb::python_error& e) {
      return IoError("listing " + Describe(prefix) + ": " + DescribePythonError(e));
    } catch (const std::exception& e) {
      return IoError("listing " + Describe(prefix) + ": " + e.what());
    }
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    return keys;
  }

  std::string Describe(std::string_view key) const override {
    if (key.empty()) return location_;
    return location_ + "/" + std::string(key);
  }

  // The wrapped Python store (GIL held: only called from Python); None after exit.
  nb::object python_store() const { return store_.is_valid() ? store_ : nb::none(); }

 private:
  nb::object store_;
  std::string location_;  // type name + path/URL, computed in Python without credentials
  nb::object submit_;
  nb::object list_keys_;
};

}  // namespace

void BindPythonStore(nb::module_& m) {
  nb::class_<BridgeRead>(m, "_BridgeRead", "One bridged read in flight (internal).")
      .def("found", &BridgeRead::Found, nb::arg("data"))
      .def("missing", &BridgeRead::Missing)
      .def("fail", &BridgeRead::Fail, nb::arg("why"))
      .def("cancel", &BridgeRead::Cancel, nb::arg("why"))
      .def("cancelled", &BridgeRead::CancelRequested);

  nb::class_<PythonStore, Store>(m, "PythonStore", nb::dynamic_attr(),
                                 "A native Store over a zarr-python Store object.")
      .def_prop_ro("python_store", &PythonStore::python_store)
      .def("__repr__", [](const PythonStore& s) { return "<insitubatch.PythonStore " + s.Describe("") + ">"; });

  m.def(
      "open_python_store",
      [](nb::object store, std::string location, nb::object submit, nb::object list_keys) -> std::shared_ptr<Store> {
        return std::make_shared<PythonStore>(std::move(store), std::move(location), std::move(submit),
                                             std::move(list_keys));
      },
      nb::arg("store"), nb::arg("location"), nb::arg("submit"), nb::arg("list_keys"),
      "Wraps a zarr-python Store (use insitubatch.bridge.wrap_python_store).");

  m.def(
      "_close_python_store_bridge",
      [] {
        g_bridge_closed.store(true, std::memory_order_release);
        std::lock_guard lock(g_stores_mutex);
        for (PythonStore* store : g_stores) store->DropPythonReferences();
      },
      "Makes every later bridged read fail Cancelled and drops the wrapped Python stores"
      " (called at interpreter exit, with the GIL held).");
}

}  // namespace insitubatch::python
