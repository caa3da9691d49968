"""insitubatch native core (C++20)"""

from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, overload

import numpy
from numpy.typing import NDArray
from typing_extensions import CapsuleType


def _mark_exiting() -> None:
    """
    From now on threads other than the main one never wait for the GIL (atexit).
    """

class Store:
    """A key -> bytes store (file, memory, HTTP, S3, ...)."""

    def read(self, key: str, offset: int | None = None, length: int | None = None, suffix: int | None = None) -> object:
        """
        Reads a key (whole, a byte range, or a suffix); None when the key is absent.
        """

    def list(self, prefix: str = '') -> list[str]:
        """Every key under `prefix`, sorted."""

    def list_dir(self, dir: str = '') -> tuple:
        """
        One level below `dir` ('' = the root, else 'a/b'): (the keys directly in it, its subdirectories), each sorted. UnsupportedError (a NotImplementedError) where the store lists only whole prefixes (use list()).
        """

    def describe(self, key: str = '') -> str:
        """Where `key` lives, as a path or URL."""

    @property
    def remote(self) -> bool:
        """Whether its reads cross a network (HTTP, S3, GCS, Azure)."""

    def warm_connections(self, key: str, connections: int) -> None:
        """
        Opens up to `connections` connections to a remote store's server in the background (one-byte reads of `key`, answers dropped); nothing on a local store. ValueError for a bad key or more than 1024 connections.
        """

    @property
    def writable(self) -> bool:
        """Whether write/delete are served (opened with read_only=False)."""

    @overload
    def write(self, key: str, value: bytes, if_absent: bool = False) -> bool:
        """
        Writes a whole object; with if_absent only when none is there (atomically). Returns whether it wrote.
        """

    @overload
    def write(self, key: str, value: Annotated[NDArray[numpy.uint8], dict(shape=(None,), order='C', device='cpu', writable=False)], if_absent: bool = False) -> bool: ...

    def delete(self, key: str) -> None:
        """Removes an object (a missing key is fine)."""

    def delete_prefix(self, prefix: str) -> None:
        """Removes every object under `prefix` + '/' ('' = all)."""

    def __repr__(self) -> str: ...

class FileStore(Store):
    @property
    def root(self) -> str: ...

class MemoryStore(Store):
    def __init__(self, writable: bool = False) -> None: ...

    def set(self, key: str, value: bytes) -> None: ...

    def erase(self, key: str) -> None: ...

class CountingStore(Store):
    """Wraps a store and counts reads (and writes, and listings) per key."""

    def __init__(self, inner: Store) -> None: ...

    def reads(self) -> dict[str, int]:
        """Reads per key since the last reset."""

    def writes(self) -> dict[str, int]:
        """Writes per key since the last reset."""

    def lists(self) -> dict[str, int]:
        """
        Listings since the last reset, per prefix: list(p) as 'p*', list_dir(d) as 'd/' ('/' for the root).
        """

    @property
    def total_reads(self) -> int: ...

    def reset(self) -> None: ...

class ReferenceSet:
    """
    A virtual store's key -> reference map (kerchunk JSON, or built entry by entry).
    """

    def __init__(self) -> None: ...

    @staticmethod
    def parse_json(text: bytes, where: str) -> ReferenceSet:
        """Parses kerchunk JSON (version 0 or 1)."""

    def add_range(self, key: str, url: str, offset: int, length: int) -> None: ...

    def add_whole(self, key: str, url: str) -> None: ...

    def add_inline(self, key: str, data: bytes) -> None: ...

    @property
    def targets(self) -> list[str]:
        """Distinct target URLs, in first-use order."""

    def first_key_of(self, target: int) -> str:
        """A key whose reference points to target URL number `target`."""

    def __len__(self) -> int: ...

class ReferenceStore(Store):
    """A read-only store over a ReferenceSet."""

    @property
    def name(self) -> str: ...

    @property
    def reference_count(self) -> int: ...

    @property
    def target_reads(self) -> int:
        """
        Reads of target objects so far (a coalesced read of neighbouring chunks counts once).
        """

def open_reference_store(refs: ReferenceSet, targets: Sequence[tuple[Store, str]], name: str) -> Store:
    """
    A store over `refs` (which it takes over, leaving it empty); targets[i] = (store, key) serves refs.targets[i].
    """

def store_schemes() -> list[tuple[str, str]]:
    """
    URL schemes as written -> the scheme of the store that serves each ("" is a plain path).
    """

def open_file_store(root: str, writable: bool = False) -> Store:
    """
    A store over a local directory (a path or a file:// URL); writable creates it when missing.
    """

class TransportOptions:
    """Timeouts, retries and TLS settings of the HTTP transport."""

    def __init__(self) -> None: ...

    @property
    def io_threads(self) -> int: ...

    @io_threads.setter
    def io_threads(self, arg: int, /) -> None: ...

    @property
    def max_attempts(self) -> int: ...

    @max_attempts.setter
    def max_attempts(self, arg: int, /) -> None: ...

    @property
    def retry_base_delay_ms(self) -> int: ...

    @retry_base_delay_ms.setter
    def retry_base_delay_ms(self, arg: int, /) -> None: ...

    @property
    def retry_max_delay_ms(self) -> int: ...

    @retry_max_delay_ms.setter
    def retry_max_delay_ms(self, arg: int, /) -> None: ...

    @property
    def retry_deadline_ms(self) -> int: ...

    @retry_deadline_ms.setter
    def retry_deadline_ms(self, arg: int, /) -> None: ...

    @property
    def connect_retry_deadline_ms(self) -> int: ...

    @connect_retry_deadline_ms.setter
    def connect_retry_deadline_ms(self, arg: int, /) -> None: ...

    @property
    def timeout_ms(self) -> int: ...

    @timeout_ms.setter
    def timeout_ms(self, arg: int, /) -> None: ...

    @property
    def connect_timeout_ms(self) -> int: ...

    @connect_timeout_ms.setter
    def connect_timeout_ms(self, arg: int, /) -> None: ...

    @property
    def verify_tls(self) -> bool: ...

    @verify_tls.setter
    def verify_tls(self, arg: bool, /) -> None: ...

    @property
    def ca_file(self) -> str: ...

    @ca_file.setter
    def ca_file(self, arg: str, /) -> None: ...

    @property
    def max_connections_per_host(self) -> int: ...

    @max_connections_per_host.setter
    def max_connections_per_host(self, arg: int, /) -> None: ...

    def validate(self) -> None: ...

def find_ca_bundle(ca_file: str = '', verify_tls: bool = True) -> dict:
    """
    The CA certificates a store opened now would verify TLS with (what print_debug_info() shows).
    """

def set_fallback_ca_bundle(path: str) -> None:
    """
    The bundle to use when the system has none (the package registers certifi's at import).
    """

class HttpStore(Store):
    """A store over plain HTTP(S) (no listing)."""

    def transport_stats(self) -> dict: ...

    @property
    def ca_bundle(self) -> str:
        """
        The CA certificates that verify its TLS servers and where they were found (SSL_CERT_FILE, the system, certifi, ...).
        """

    def __repr__(self) -> str: ...

class S3Store(Store):
    """An S3 (or S3-compatible) bucket prefix."""

    @property
    def region(self) -> str: ...

    @property
    def endpoint_url(self) -> str: ...

    @property
    def anonymous(self) -> bool: ...

    @property
    def credentials_source(self) -> str:
        """
        Where the credentials come from ("environment", "profile 'x'", "instance metadata (...)", ...); "" when anonymous. Never a key.
        """

    def transport_stats(self) -> dict: ...

    @property
    def ca_bundle(self) -> str:
        """
        The CA certificates that verify its TLS servers and where they were found (SSL_CERT_FILE, the system, certifi, ...).
        """

    def __repr__(self) -> str: ...

class GcsStore(Store):
    """A Google Cloud Storage bucket prefix."""

    @property
    def endpoint_url(self) -> str: ...

    @property
    def anonymous(self) -> bool: ...

    @property
    def credentials_source(self) -> str:
        """
        Where the token comes from ("the token argument", "service account ... (file ...)", "the metadata server ..."); "" when anonymous. Never the token.
        """

    def transport_stats(self) -> dict: ...

    @property
    def ca_bundle(self) -> str:
        """
        The CA certificates that verify its TLS servers and where they were found (SSL_CERT_FILE, the system, certifi, ...).
        """

    def __repr__(self) -> str: ...

class AzureStore(Store):
    """An Azure Blob Storage container prefix."""

    @property
    def container_url(self) -> str: ...

    @property
    def anonymous(self) -> bool: ...

    @property
    def credentials_source(self) -> str:
        """
        What authorizes the requests ("the account key (AZURE_STORAGE_ACCOUNT_KEY)", "service principal ...", "managed identity at ..."); "" when anonymous. Never the secret.
        """

    def transport_stats(self) -> dict: ...

    @property
    def ca_bundle(self) -> str:
        """
        The CA certificates that verify its TLS servers and where they were found (SSL_CERT_FILE, the system, certifi, ...).
        """

    def __repr__(self) -> str: ...

def open_azure_store(url: str, transport: TransportOptions, account_name: str = '', endpoint: str = '', use_emulator: bool = False, skip_signature: bool = False, credentials: Mapping[str, str] = {}, writable: bool = False, multipart_part_size: int = 67108864) -> Store:
    """
    An Azure store at az://container/prefix (use insitubatch.store() for checked options).
    """

def azure_string_to_sign(method: str, headers: Sequence[str], account: str, path: str, query: Sequence[tuple[str, str]]) -> str:
    """
    SharedKey's string to sign for one request (tests check it against azure-storage-blob).
    """

def open_http_store(url: str, transport: TransportOptions, headers: Mapping[str, str]) -> Store:
    """
    An HTTP(S) store at `url` (use insitubatch.store() for checked options).
    """

def open_s3_store(url: str, transport: TransportOptions, region: str = '', endpoint: str = '', virtual_hosted_style: bool | None = None, skip_signature: bool = False, request_payer: bool = False, access_key_id: str = '', secret_access_key: str = '', session_token: str = '', profile: str = '', writable: bool = False, multipart_part_size: int = 67108864) -> Store:
    """
    An S3 store at s3://bucket/prefix (use insitubatch.store() for checked options).
    """

def open_gcs_store(url: str, transport: TransportOptions, endpoint: str = '', skip_signature: bool = False, token: str = '', service_account_key: str = '', service_account_path: str = '', writable: bool = False, multipart_part_size: int = 67108864) -> Store:
    """
    A GCS store at gs://bucket/prefix (use insitubatch.store() for checked options).
    """

class _BridgeRead:
    """One bridged read in flight (internal)."""

    def found(self, data: object) -> None: ...

    def missing(self) -> None: ...

    def fail(self, why: str) -> None: ...

    def cancel(self, why: str) -> None: ...

    def cancelled(self) -> bool: ...

class PythonStore(Store):
    """A native Store over a zarr-python Store object."""

    @property
    def python_store(self) -> object: ...

    def __repr__(self) -> str: ...

def open_python_store(store: object, location: str, submit: object, list_keys: object) -> Store:
    """Wraps a zarr-python Store (use insitubatch.bridge.wrap_python_store)."""

def _close_python_store_bridge() -> None:
    """
    Makes every later bridged read fail Cancelled and drops the wrapped Python stores (called at interpreter exit, with the GIL held).
    """

class ZarrArray:
    """One opened zarr array (metadata + codec chain)."""

    @property
    def path(self) -> str: ...

    @property
    def metadata(self) -> dict: ...

    @property
    def codec_chain(self) -> str: ...

    @property
    def chunk_bytes(self) -> int: ...

    def chunk_key(self, coords: Sequence[int]) -> str: ...

    def read_chunk(self, coords: Sequence[int]) -> object:
        """
        The decoded stored chunk at `coords` (full chunk shape; fill value if absent).
        """

    def write_chunk(self, coords: Sequence[int], chunk: Annotated[NDArray, dict(order='C', device='cpu', writable=False)]) -> None:
        """
        Encodes one whole chunk (C-contiguous, the full chunk shape and dtype) and writes it; the store must be writable.
        """

    def read_string_chunk(self, coords: Sequence[int]) -> list:
        """
        A variable-length string chunk's items in C order (str, or bytes for variable_length_bytes); the fill value where the chunk is absent.
        """

class Hierarchy:
    """The groups and arrays of a zarr store."""

    @property
    def zarr_format(self) -> int: ...

    @property
    def consolidated(self) -> bool: ...

    def array_paths(self) -> list[str]: ...

    def kind(self, arg: str, /) -> str: ...

    def array_metadata(self, arg: str, /) -> dict: ...

    def open_array(self, arg: str, /) -> ZarrArray: ...

def copy_rows(dst: Annotated[NDArray, dict(order='C', device='cpu')], dst_rows: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], src: Annotated[NDArray, dict(order='C', device='cpu', writable=False)], src_rows: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)]) -> None:
    """
    dst[dst_rows[k]] = src[src_rows[k]] for each k (C-contiguous arrays of one dtype; int64 row indices), one copy per row without the GIL.
    """

def open_hierarchy(store: Store) -> Hierarchy:
    """Reads the hierarchy's metadata (no chunk data)."""

def build_info() -> dict: ...

class NativeTransform:
    """
    A chunk transform the engine runs, built and checked in C++ (see the factories).
    """

    @property
    def kind(self) -> str: ...

    @property
    def parameters(self) -> int: ...

    @property
    def out_shape(self) -> list[int]: ...

    def __repr__(self) -> str: ...

def python_transform(callback: object, out_shape: Sequence[int], out_dtype: str) -> NativeTransform:
    """
    Runs callback(chunk_index, sample_offset, array) -> array of out_shape x out_dtype per chunk, with the GIL.
    """

def standard_scaler(mean: Sequence[float], scale: Sequence[float], field: Sequence[int], dtype: str) -> NativeTransform:
    """
    (x - mean) * scale, natively (one value each, or one per element of the field).
    """

def cast_transform(in_dtype: str, out_dtype: str, field: Sequence[int]) -> NativeTransform:
    """A dtype conversion, natively."""

def scale_offset_transform(in_dtype: str, out_dtype: str, scale: float, offset: float, field: Sequence[int]) -> NativeTransform:
    """
    x.astype(out) * scale + offset, each rounding in out as numpy does, natively.
    """

class StageTimes:
    """A pass's summed stage times (engine/stats.h)."""

    @property
    def fetch_wait_s(self) -> float: ...

    @property
    def admission_parked_s(self) -> float: ...

    @property
    def decode_s(self) -> float: ...

    @property
    def assemble_s(self) -> float: ...

    @property
    def gather_s(self) -> float: ...

    @property
    def batch_transform_s(self) -> float: ...

class Waited:
    """The consumer's waits, charged per stage."""

    @property
    def store_s(self) -> float: ...

    @property
    def decode_s(self) -> float: ...

    @property
    def residency_s(self) -> float: ...

    @property
    def gather_s(self) -> float: ...

class Depths:
    """Queue depths and peaks of a pass."""

    @property
    def batch_queue_capacity(self) -> int: ...

    @property
    def batch_queue_peak(self) -> int: ...

    @property
    def batch_queue_samples(self) -> int: ...

    @property
    def batch_queue_empty(self) -> int: ...

    @property
    def batch_queue_full_enough(self) -> int: ...

    @property
    def inflight_peak(self) -> int: ...

    @property
    def max_inflight(self) -> int: ...

    @property
    def decode_queue_peak(self) -> int: ...

    @property
    def decode_threads(self) -> int: ...

    @property
    def chunk_decoders_peak(self) -> int: ...

    @property
    def gather_threads(self) -> int: ...

    @property
    def resident_peak(self) -> int: ...

    @property
    def resident_peak_bytes(self) -> int: ...

    @property
    def budget_bytes(self) -> object:
        """The residency budget in bytes, None when unbounded."""

class RetryStats:
    """Transient store failures retried on the way to a pass's bytes."""

    @property
    def retries(self) -> int: ...

    @property
    def backoff_s(self) -> float: ...

    @property
    def last_error(self) -> str: ...

    @property
    def corrupt_rereads(self) -> int: ...

class BadChunk:
    """
    A stored chunk served as fill: array, chunk index, inner coordinates, and why
    its bytes did not decode.
    """

    @property
    def array(self) -> str: ...

    @property
    def chunk_index(self) -> int: ...

    @property
    def inner_coord(self) -> list[int]: ...

    @property
    def reason(self) -> str: ...

class PassStats:
    """What one pass did (engine/stats.h)."""

    @property
    def split(self) -> str: ...

    @property
    def epoch(self) -> int: ...

    @property
    def batches(self) -> int: ...

    @property
    def samples(self) -> int: ...

    @property
    def cache_hits(self) -> int: ...

    @property
    def cache_misses(self) -> int: ...

    @property
    def rereads(self) -> int: ...

    @property
    def revived(self) -> int: ...

    @property
    def revive_rejected(self) -> int: ...

    @property
    def source_changed(self) -> int: ...

    @property
    def evictions(self) -> int: ...

    @property
    def tiles_read(self) -> int: ...

    @property
    def bytes_read(self) -> int: ...

    @property
    def bad_chunks(self) -> list[BadChunk]: ...

    @property
    def retry(self) -> RetryStats: ...

    @property
    def finished(self) -> bool: ...

    @property
    def wall_s(self) -> float: ...

    @property
    def times(self) -> StageTimes: ...

    @property
    def waited(self) -> Waited: ...

    @property
    def depths(self) -> Depths: ...

class Pass:
    """One iteration over one split view."""

    def next(self) -> object:
        """
        The next batch as ([arrays per label], sample_indices, patch origins or None, [per label, the rows
        filled in for a bad chunk] or None), or None at the end.
        """

    def close(self, reason: str = 'the pass was closed') -> None:
        """
        Cancels the pass and releases its pins, promptly (idempotent); a next() waiting on
        another thread raises CancelledError(reason).
        """

    def set_next_order(self, rows: Annotated[NDArray[numpy.int64], dict(order='C', device='cpu', writable=False)], block_start: Annotated[NDArray[numpy.int64], dict(order='C', device='cpu', writable=False)]) -> None:
        """
        The view's order next epoch, for a pass started with next_order_later (once; later
        calls are ignored).
        """

    def stats(self) -> PassStats:
        """What the pass did so far (PassStats)."""

    def trace(self) -> object:
        """
        What a recorded pass recorded so far (see TraceToPython in bindings.h), or None when
        its spec did not ask for a trace.
        """

    @property
    def n_batches(self) -> int: ...

    @property
    def n_rows(self) -> int: ...

class EngineConfig:
    """
    The engine's options with their defaults and limits (engine/engine.h): each
    setter refuses a value outside its limits, validate() checks them together.
    """

    def __init__(self) -> None: ...

    @property
    def max_inflight(self) -> int:
        """Stored-chunk reads from request to decoded tile."""

    @max_inflight.setter
    def max_inflight(self, arg: object, /) -> None: ...

    @property
    def decode_threads(self) -> int:
        """0 = one per core."""

    @decode_threads.setter
    def decode_threads(self, arg: object, /) -> None: ...

    @property
    def gather_threads(self) -> int:
        """0 = one per four decode threads."""

    @gather_threads.setter
    def gather_threads(self, arg: object, /) -> None: ...

    @property
    def on_bad_chunk(self) -> str:
        """"raise" or "nan"."""

    @on_bad_chunk.setter
    def on_bad_chunk(self, arg: object, /) -> None: ...

    @property
    def eviction(self) -> str:
        """"next_use" or "lru"."""

    @eviction.setter
    def eviction(self, arg: object, /) -> None: ...

    @property
    def budget_bytes(self) -> int:
        """Residency budget; 0 = unbounded."""

    @budget_bytes.setter
    def budget_bytes(self, arg: int, /) -> None: ...

    @property
    def pass_floor_bytes(self) -> int:
        """The residency one pass needs."""

    @pass_floor_bytes.setter
    def pass_floor_bytes(self, arg: int, /) -> None: ...

    @property
    def auto_budget(self) -> bool:
        """The budget grows for concurrent passes."""

    @auto_budget.setter
    def auto_budget(self, arg: bool, /) -> None: ...

    @property
    def max_auto_budget_bytes(self) -> int:
        """0 = half the machine's memory."""

    @max_auto_budget_bytes.setter
    def max_auto_budget_bytes(self, arg: int, /) -> None: ...

    @property
    def cache_dir(self) -> str | None:
        """The disk tier's directory (None: no disk tier)."""

    @cache_dir.setter
    def cache_dir(self, arg: str | None) -> None: ...

    @property
    def persist(self) -> bool: ...

    @persist.setter
    def persist(self, arg: bool, /) -> None: ...

    @property
    def readonly_cache(self) -> bool: ...

    @readonly_cache.setter
    def readonly_cache(self, arg: bool, /) -> None: ...

    @property
    def reset_stale_cache(self) -> bool: ...

    @reset_stale_cache.setter
    def reset_stale_cache(self, arg: bool, /) -> None: ...

    @property
    def revalidate(self) -> str:
        """
        When cached chunks are checked against their source: "open", "first_use" or "never".
        """

    @revalidate.setter
    def revalidate(self, arg: object, /) -> None: ...

    def validate(self) -> None:
        """
        Raises InvalidArgumentError unless the options hold together (Engine() checks it too).
        """

def check_sample_lengths(lengths: Sequence[tuple[str, int]]) -> None:
    """
    Raises InvalidArgumentError unless every (variable, sample-axis length) has the same length.
    """

class PassSpec:
    """One pass: its view, epoch, order and batches (limits checked in C++)."""

    def __init__(self) -> None: ...

    @property
    def split(self) -> str: ...

    @split.setter
    def split(self, arg: str, /) -> None: ...

    @property
    def epoch(self) -> int: ...

    @epoch.setter
    def epoch(self, arg: int, /) -> None: ...

    @property
    def ref_spc(self) -> int: ...

    @ref_spc.setter
    def ref_spc(self, arg: int, /) -> None: ...

    @property
    def next_order_later(self) -> bool:
        """
        The next epoch's order comes later, through Pass.set_next_order (eviction by next use).
        """

    @next_order_later.setter
    def next_order_later(self, arg: bool, /) -> None: ...

    @property
    def trace_events(self) -> int:
        """
        Record the pass's timeline in a ring of this many events: True for the default ring,
        False or 0 for none.
        """

    @trace_events.setter
    def trace_events(self, arg: object, /) -> None: ...

    @property
    def batch_size(self) -> int: ...

    @batch_size.setter
    def batch_size(self, arg: object, /) -> None: ...

    @property
    def prefetch_depth(self) -> int:
        """Batches gathered ahead of the consumer."""

    @prefetch_depth.setter
    def prefetch_depth(self, arg: object, /) -> None: ...

    @property
    def labels(self) -> list[tuple[str, int, int]]:
        """(name, array index, window offset) per label, in gather order."""

    @labels.setter
    def labels(self, arg: Sequence[tuple[str, int, int]], /) -> None: ...

    def set_patches(self, grid: PatchGrid, label_axes: Sequence[Sequence[int]], pads: Sequence[bytes] = []) -> None:
        """
        Patch samples (set the labels first): per label, per field axis, the patch axis it is
        cut along or -1. The order's rows are then on the virtual grid (PatchGrid). With
        patch_edges='pad', `pads` holds per label one element in its batch dtype (b'' when
        not patched): what a window past the field's end is padded with.
        """

    def set_order(self, rows: Annotated[NDArray[numpy.int64], dict(order='C', device='cpu', writable=False)], block_start: Annotated[NDArray[numpy.int64], dict(order='C', device='cpu', writable=False)]) -> None:
        """This pass's order: (chunk, sample) rows and block starts."""

    def validate(self) -> None:
        """
        Raises InvalidArgumentError unless the options hold together (start_pass checks it too).
        """

class Engine:
    """The dataset-owned engine: pool, decode pool, IO budget."""

    def __init__(self, arrays: Sequence[ZarrArray], sample_axes: Sequence[int], config: EngineConfig, transforms: list = [], fingerprints: Sequence[str] = [], crops: Sequence[tuple[Sequence[int], Sequence[int]]] = []) -> None:
        """
        `crops`: per array, empty or the (start, stop) index range kept per field axis (stop <= start
        wraps across the axis's end): only those tiles are read and resident.
        """

    def start_pass(self, spec: PassSpec) -> Pass: ...

    @property
    def budget_bytes(self) -> int: ...

    def cache_counters(self) -> dict:
        """
        The disk tier's counters (revivals, files written, what the log holds) and, per array with
        logged entries, how they were checked against their source at open (revalidation).
        """

    @property
    def budget_grown(self) -> int:
        """
        The budget the last start_pass grew the automatic budget to (0: unchanged).
        """

    def pool_state(self) -> dict: ...

    def lock_batch_pages(self, register_fn: int, unregister_fn: int, budget_bytes: int) -> None:
        """
        From now on batch buffers are page-locked through the two C functions (addresses of
        cudaHostRegister / cudaHostUnregister) while the locked bytes stay within the budget.
        The first functions stay for the engine's life; later calls change only the budget.
        """

    def batch_pages_locked(self, address: int) -> bool:
        """Whether the batch buffer starting at `address` is page-locked."""

    def clear_cache(self) -> int:
        """Drops every resident chunk no pass holds; returns how many."""

    @property
    def decode_threads(self) -> int: ...

    @property
    def gather_threads(self) -> int:
        """
        Threads that gather each batch (the producer and its helpers), resolved.
        """

def decode_throughput(array: ZarrArray, store: Store, coords: Sequence[Sequence[int]], threads: int) -> tuple[float, int, int]:
    """
    Wall seconds for `threads` threads to decode the chunks at `coords` (their stored bytes read first, untimed), the decoded bytes and the stored bytes.
    """

def zstd_decode_ceiling(files: Sequence[str], decoded_size: int, threads: int = 0, repeats: int = 3) -> float:
    """
    Best wall seconds to zstd-decode every file (read into memory first) with `threads`.
    """

def zstd_decode_floor(files: Sequence[str], decoded_size: int, threads: int = 0, ring: int = 0) -> float:
    """
    Wall seconds for `threads` threads to read every file (from the page cache) and zstd-decode it into its own place in one fresh buffer: what a cold process must at least do to hold these chunks' values. One run: a second would find the memory warm. With `ring` > 0, frame i decodes into place i % ring of a buffer of `ring` chunks, reused as the ring wraps: what a cold process holding `ring` decoded chunks at a time (a block-shuffled epoch: the block being served and the next) must at least do.
    """

def read_throughput(store: Store, keys: Sequence[str], concurrency: int, repeats: int = 3) -> tuple[list[float], int]:
    """
    Wall seconds of each repeat reading every key once (whole objects, at most `concurrency` in flight, no decode), and the bytes one repeat received.
    """

class PatchGrid:
    """Patch samples: the lattice or random draw of windows per anchor."""

    def __init__(self, mode: str, extent: Sequence[int], size: Sequence[int], stride: Sequence[int], per_sample: int, seed: int, edges: str = 'inside') -> None: ...

    def lattice(self, axis: int) -> object:
        """The grid's origins along patch axis `axis`, in order (int64)."""

    @property
    def mode(self) -> str: ...

    @property
    def edges(self) -> str: ...

    @property
    def per_sample(self) -> int:
        """Patches per anchor."""

    def origins(self, anchors: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], patches: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], epoch: int) -> object:
        """
        Each (anchor, patch)'s origin in `epoch`: (N, axes) int64 (what batches carry as origins).
        """

def check_order_args(chunk_ids: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], spc: int, n_samples: int, block_chunks: int) -> None:
    """
    Raises InvalidArgumentError unless the arguments describe a valid epoch order.
    """

def shuffled_order(chunk_ids: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], spc: int, n_samples: int, block_chunks: int, chunk_bits: CapsuleType, row_bits: CapsuleType) -> tuple[object, object]:
    """
    The shuffled order, draw for draw numpy's (engine/order.h): the chunks permuted by the
    bit generator `chunk_bits`, each block's rows by `row_bits` (numpy BitGenerator capsules;
    hold their locks): (rows (N, 2), block_start).
    """

def sequential_order(chunk_ids: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], spc: int, n_samples: int, block_chunks: int) -> tuple[object, object]:
    """
    Chunks in the given order, `within` ascending: (rows (N, 2), block_start).
    """

def keep_anchors(rows: Annotated[NDArray[numpy.int64], dict(order='C', device='cpu', writable=False)], block_start: Annotated[NDArray[numpy.int64], dict(order='C', device='cpu', writable=False)], spc: int, lo: int, hi: int) -> tuple[object, object]:
    """
    The order without rows whose anchor lies outside [lo, hi) (a window's edges), block
    bounds kept consistent: the filter the engine's plan applies (engine/order.h).
    """

def shuffle_quality(rows: Annotated[NDArray[numpy.int64], dict(shape=(None, None), order='C', device='cpu', writable=False)], spc: int) -> float:
    """
    mean(|diff(rank)|) / (n / 3) clipped to 1, rank = chunk * spc + within;
    0 when fewer than 2 rows.
    """

def machine_memory_bytes() -> int:
    """
    The memory this process may use: physical RAM, or the cgroup's limit where lower.
    """

ALLOCATOR_RETENTION: float = 1.25

def pin_budget_bytes() -> int:
    """
    The framework adapters' default page-lock budget: an eighth of machine_memory_bytes().
    """

class SizedLabel:
    """
    One label the memory model sizes (an input of memory_model): its array as
    stored, its window offset, what gather writes per sample (`out_field` x
    `out_dtype`; the stored field when None) and whether a chunk transform
    assembles its slot.
    """

    def __init__(self, path: str, shape: Sequence[int], chunks: Sequence[int], sample_axis: int, dtype: str, offset: int = 0, out_field: Sequence[int] | None = None, out_dtype: str | None = None, transformed: bool = False, row_field: Sequence[int] = [], crop_start: Sequence[int] = [], crop_stop: Sequence[int] = []) -> None: ...

class LabelTerms:
    """One label's figures in memory_model's result."""

    @property
    def stored_chunk_bytes(self) -> int: ...

    @property
    def stored_chunks(self) -> int: ...

    @property
    def slot_bytes(self) -> int: ...

    @property
    def logical_chunk_bytes(self) -> int: ...

    @property
    def gather_run_bytes(self) -> int: ...

    @property
    def output_sample_bytes(self) -> int: ...

class MemoryTerms:
    """
    Every figure of the memory model, by name (engine/sizing.h): what
    describe() prints and the construction check tests.
    """

    @property
    def labels(self) -> list[LabelTerms]: ...

    @property
    def ref_spc(self) -> int: ...

    @property
    def working_set_bytes(self) -> int: ...

    @property
    def budget_bytes(self) -> int: ...

    @property
    def budget_is_automatic(self) -> bool: ...

    @property
    def residency_bytes(self) -> int: ...

    @property
    def inflight_bytes(self) -> int: ...

    @property
    def queued_batches(self) -> int: ...

    @property
    def queue_bytes(self) -> int: ...

    @property
    def scratch_bytes(self) -> int: ...

    @property
    def accounted_bytes(self) -> int: ...

    @property
    def estimated_peak_bytes(self) -> int: ...

    @property
    def disk_bytes(self) -> int: ...

    @property
    def floor_ram_bytes(self) -> int: ...

    @property
    def machine_bytes(self) -> int: ...

def memory_model(labels: Sequence[SizedLabel], *, batch_size: int, block_chunks: int, ref_spc: int, max_inflight: int, prefetch_depth: int, shuffle: bool, reread_spill: bool, batch_transforms: bool, n_train_chunks: int, split_chunks: int, budget: int | None, iterations: int, cache_dir: bool) -> MemoryTerms:
    """
    The whole memory model from geometry and configuration alone (engine/sizing's SizeMemory):
    per-label slot, gather and chunk figures, the working-set floor, the budget, residency,
    reads in flight, batch queue, scratch, accounted and estimated peak, cache_dir disk and the
    machine's memory. `ref_spc` 0: the labels' smallest sample chunk; `budget` None: the floor.
    """

def resolve_block_chunks(requested: int, batch_size: int, ref_spc: int, n_chunks: int) -> int:
    """
    block_chunks widened so one batch fits in one block (never narrowed), at least 1.
    """

def valid_anchor_range(offsets: Sequence[int], n_samples: int) -> tuple[int, int]: ...

def cache_filesystem_type(path: str) -> str:
    """The filesystem type holding `path` (from /proc/self/mountinfo), or ''."""

def cache_is_network_filesystem(type: str) -> bool: ...

def cache_locks_work(dir: str) -> bool:
    """
    Whether advisory (flock) locks work in `dir`: False only where the filesystem has none (ENOLCK, EOPNOTSUPP). Creates and writes nothing.
    """

def cache_lock_holder(dir: str) -> str:
    """What the writer holding `dir` recorded (pid, host, since), or ''."""

class KeyList:
    """URIs sharing a prefix, packed (front-coded) in native memory."""

    def __init__(self, prefix: str = '') -> None: ...

    def append(self, arg: str, /) -> None: ...

    def extend(self, arg: Iterable, /) -> None: ...

    def __len__(self) -> int: ...

    def __getitem__(self, arg: int, /) -> str: ...

    def suffix(self, arg: int, /) -> str: ...

    @property
    def prefix(self) -> str: ...

    @property
    def memory_bytes(self) -> int: ...

    def serialize(self) -> bytes: ...

    @staticmethod
    def deserialize(arg: bytes, /) -> KeyList: ...

    def __eq__(self, arg: KeyList, /) -> bool: ...

def read_csv_index(path: str, uri_column: str, label_column: str, pack: bool, prefix: str | None = None) -> tuple:
    """
    (URIs as a KeyList or list, labels as int64 array, list of str, or None).
    """

def bucket_prefix(arg: str, /) -> str: ...

class ObjectCache:
    """Objects downloaded to local files (planfetch)."""

    @staticmethod
    def open(dir: str, max_bytes: int, download_threads: int, min_age_seconds: float, lock_wait_seconds: float = 600.0, parent_pid: int = 0) -> ObjectCache: ...

    def register_store(self, prefix: str, store: Store) -> None: ...

    def has_store_for(self, uri: str) -> bool: ...

    def local_path(self, arg: str, /) -> str: ...

    def ensure_local(self, uri: str) -> str: ...

    def prefetch(self, uris: Sequence[str]) -> None: ...

    def prune(self, mode: str, backend: str, keep: Sequence[str] = []) -> dict: ...

    def close(self) -> None:
        """
        Cancels queued and in-flight downloads and waits for them; later ones fail.
        """

    def stats(self) -> dict: ...

class Prefetcher:
    """A plan's sliding window of downloads (planfetch)."""

    @staticmethod
    def create(cache: ObjectCache, uris: KeyList, batches_ahead: int, batches_back: int, prune_every: int, prune_mode: str, prune_backend: str, trace: object = False) -> Prefetcher:
        """
        `trace`: record the run's downloads, waits and prunes (True: the default ring of events).
        """

    def trace(self) -> object:
        """
        What a recorded prefetcher recorded so far (TraceToPython in bindings.h), or None.
        """

    def set_plan(self, plan: Annotated[NDArray[numpy.int64], dict(shape=(None, None), order='C', device='cpu', writable=False)], keep: Annotated[NDArray[numpy.int64], dict(shape=(None, None), order='C', device='cpu', writable=False)] | None = None) -> None:
        """
        `keep`: the batches whose files a prune keeps, when other ranks share the directory.
        """

    def prime(self, start: int = 0) -> None: ...

    def on_batch_yielded(self, batch_idx: int) -> None: ...

    def stats(self) -> dict: ...

def trace_events(trace: object) -> int:
    """
    The ring a run's `trace=` asks for: True -> the default number of events, False -> 0, a
    number within the recorder's limits -> itself; anything else is refused.
    """
