/*
 * kvidx.c — the Python binding of kvidx's reader API (a C extension module, `import kvidx`).
 *
 * kvidx.Reader wraps one struct kvidx_reader: attach, the index's own key scheme (keys()),
 * bulk scoring (score()), route commits and outcomes. Token and key arrays cross the boundary
 * as buffers (array('I'), array('Q'), NumPy) without per-element conversion; lists and other
 * sequences are converted in C.
 *
 * Rules this file keeps (docs/api.md "Using kvidx from Python"):
 *  1. One handle, one thread at a time: every method claims the handle with a CAS on
 *     rd_owner (the calling thread's id) and releases it on return; a second thread that
 *     finds it claimed gets ConcurrentUseError instead of sharing the C handle, whose calls
 *     are single-threaded (kvidx.h).
 *  2. The GIL is released around kvidx_score() and the key chain, which read only C memory
 *     owned by the call (converted arrays) or pinned by it (buffer views, held str objects).
 *  3. -KVIDX_ERETRY (the reader was expelled while stalled and has re-registered) is retried
 *     once; any other error raises kvidx.Error(code, kvidx_strerror(code)).
 *  4. Fork: a Reader belongs to the process that opened it (its registry slot is held by an
 *     OFD lock shared with a forked child). In a child every method raises kvidx.Error and
 *     the destructor leaves the C handle alone (closing it would free the parent's slot).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <kvidx.h>

#define ROWS_INLINE 64 /* score rows on the stack; more candidates than this use the heap */

static PyObject *KvidxError, *ConcurrentUseError, *ArrayType;
static PyTypeObject PodType, ScoreType, LoadType;

typedef struct {
	PyObject_HEAD
	struct kvidx_reader *rd_r;
	_Atomic unsigned long rd_owner; /* thread id inside a method, 0 when free (rule 1) */
	pid_t rd_pid;                   /* the process that opened it (rule 4) */
	char rd_name[KVIDX_NAME_MAX];
} ReaderObject;

/* ---- errors ---- */

static PyObject *raise_kvidx(int rc)
{
	PyObject *args = Py_BuildValue("(is)", -rc, kvidx_strerror(rc));

	if (args) {
		PyErr_SetObject(KvidxError, args);
		Py_DECREF(args);
	}
	return NULL;
}

/* Reader(name) failed: the index's name, what the error means here and what to do. */
static void raise_open(const char *name, int err)
{
	const char *hint;

	switch (err) {
	case ENOENT:
		hint = "no such index in /dev/shm: is kvidx-ingestd running with this --name, on "
		       "this host (or in this pod's /dev/shm)?";
		break;
	case EACCES:
	case EPERM:
		hint = "permission denied: the reader must be in the index's group (kvidx-ingestd "
		       "--group) or its owner";
		break;
	case KVIDX_ENOSLOT:
		hint = "every reader slot is taken: close unused Readers or raise kvidx-ingestd "
		       "--max-readers";
		break;
	default:
		hint = "cannot be opened";
	}
	PyObject *msg = PyUnicode_FromFormat("kvidx index '%s': %s (%s)", name, hint,
					     kvidx_strerror(-err));
	PyObject *t = msg ? Py_BuildValue("(iN)", err, msg) : NULL;
	if (t) {
		PyErr_SetObject(KvidxError, t);
		Py_DECREF(t);
	}
}

/* ---- argument converters ("O&"): ranges checked, never wrapped ---- */

/* A correlation id: an int in [0, 2**64), or a request id (str or bytes) through
 * kvidx_corr_id(), as kvidx.corr_id() gives it. */
static int corr_conv(PyObject *o, void *out)
{
	uint64_t *v = out;

	if (PyUnicode_Check(o)) {
		Py_ssize_t n;
		const char *s = PyUnicode_AsUTF8AndSize(o, &n);
		if (!s)
			return 0;
		*v = kvidx_corr_id(s, (size_t)n);
		return 1;
	}
	if (PyBytes_Check(o)) {
		*v = kvidx_corr_id(PyBytes_AS_STRING(o), (size_t)PyBytes_GET_SIZE(o));
		return 1;
	}
	if (!PyLong_Check(o) || PyBool_Check(o)) {
		PyErr_Format(PyExc_TypeError, "corr_id is an int in [0, 2**64) or a request id "
			     "(str), not %.100s", Py_TYPE(o)->tp_name);
		return 0;
	}
	unsigned long long x = PyLong_AsUnsignedLongLong(o);
	if (x == (unsigned long long)-1 && PyErr_Occurred()) {
		PyErr_Clear();
		PyErr_Format(PyExc_OverflowError, "corr_id %R is not in [0, 2**64)", o);
		return 0;
	}
	*v = x;
	return 1;
}

/* A count that is a uint32 in C (tokens, blocks): an int in [0, 2**32). */
static int u32_conv(PyObject *o, void *out)
{
	uint32_t *v = out;

	if (!PyLong_Check(o) || PyBool_Check(o)) {
		PyErr_Format(PyExc_TypeError, "a token or block count is an int, not %.100s",
			     Py_TYPE(o)->tp_name);
		return 0;
	}
	unsigned long long x = PyLong_AsUnsignedLongLong(o);
	if ((x == (unsigned long long)-1 && PyErr_Occurred()) || x > UINT32_MAX) {
		PyErr_Clear();
		PyErr_Format(PyExc_OverflowError, "count %R is not in [0, 2**32)", o);
		return 0;
	}
	*v = (uint32_t)x;
	return 1;
}

/* ---- the handle's claim (rule 1) and process check (rule 4) ---- */

static int claim(ReaderObject *self)
{
	unsigned long me = PyThread_get_thread_ident(), free_ = 0;

	if (self->rd_pid != getpid()) {
		PyErr_SetString(KvidxError, "kvidx.Reader was opened in another process (before a "
					    "fork): open a new Reader in this process");
		return -1;
	}
	if (!self->rd_r) {
		PyErr_SetString(PyExc_ValueError, "kvidx.Reader is closed");
		return -1;
	}
	/* seq_cst CAS: pairs with the store in unclaim(), so the previous owner's use of the
	 * C handle happens before ours. */
	if (!atomic_compare_exchange_strong(&self->rd_owner, &free_, me)) {
		PyErr_Format(ConcurrentUseError,
			     "kvidx.Reader used from two threads at once (thread %lu is inside a "
			     "call): a Reader is a per-thread handle, open one Reader per thread",
			     free_);
		return -1;
	}
	return 0;
}

static void unclaim(ReaderObject *self)
{
	/* seq_cst store: pairs with the CAS in claim() of the next owner. */
	atomic_store(&self->rd_owner, 0);
}

/* ---- array conversions ---- */

/* A read-only array of n elements of one C type, borrowed from a buffer or converted. */
struct carr {
	Py_buffer view;
	bool has_view;
	void *mem; /* converted copy (PyMem), when not a view */
	const void *p;
	size_t n;
};

static void carr_release(struct carr *a)
{
	if (a->has_view)
		PyBuffer_Release(&a->view);
	PyMem_Free(a->mem);
	memset(a, 0, sizeof(*a));
}

/* Whether a buffer format names an unsigned integer of itemsize bytes. */
static bool fmt_unsigned(const char *fmt, Py_ssize_t itemsize, size_t want)
{
	if (!fmt)
		return itemsize == 1 && want == 1;
	if (*fmt == '@' || *fmt == '=' || *fmt == '<' || *fmt == '!' || *fmt == '>') {
		if (*fmt == '!' || *fmt == '>')
			return false; /* big-endian data: not this machine's integers */
		fmt++;
	}
	if (fmt[0] == '\0' || fmt[1] != '\0' || (size_t)itemsize != want)
		return false;
	return strchr("BHILQN", fmt[0]) != NULL;
}

/*
 * Fills a with obj as an array of unsigned integers of width bytes (4 or 8): a C-contiguous
 * buffer of that type is used in place; any other sequence of integers is converted.
 * Returns 0 or -1 with an exception set.
 */
static int carr_get(PyObject *obj, size_t width, const char *what, struct carr *a)
{
	memset(a, 0, sizeof(*a));
	if (PyObject_CheckBuffer(obj) && !PyUnicode_Check(obj)) {
		if (PyObject_GetBuffer(obj, &a->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0) {
			a->has_view = true;
			if (fmt_unsigned(a->view.format, a->view.itemsize, width) &&
			    a->view.len % (Py_ssize_t)width == 0) {
				a->p = a->view.buf;
				a->n = (size_t)a->view.len / width;
				return 0;
			}
			const char *f = a->view.format ? a->view.format : "B";
			PyErr_Format(PyExc_TypeError,
				     "%s: a buffer of uint%zu is needed (array('%s'), numpy.uint%zu), "
				     "not format '%s' with itemsize %zd", what, width * 8,
				     width == 4 ? "I" : "Q", width * 8, f, a->view.itemsize);
			carr_release(a);
			return -1;
		}
		PyErr_Clear(); /* not contiguous: convert it as a sequence */
	}
	PyObject *seq = PySequence_Fast(obj, what);
	if (!seq)
		return -1;
	Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
	PyObject **items = PySequence_Fast_ITEMS(seq);
	a->mem = PyMem_Malloc(n ? (size_t)n * width : 1);
	if (!a->mem) {
		Py_DECREF(seq);
		PyErr_NoMemory();
		return -1;
	}
	uint64_t max = width == 4 ? UINT32_MAX : UINT64_MAX;
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *it = items[i], *ix = NULL;
		if (!PyLong_Check(it)) {
			ix = PyNumber_Index(it);
			if (!ix)
				goto bad;
			it = ix;
		}
		unsigned long long v = PyLong_AsUnsignedLongLong(it);
		Py_XDECREF(ix);
		if (v == (unsigned long long)-1 && PyErr_Occurred())
			goto bad;
		if (v > max) {
			PyErr_Format(PyExc_OverflowError, "%s[%zd] = %llu does not fit in uint%zu",
				     what, i, v, width * 8);
			goto bad;
		}
		if (width == 4)
			((uint32_t *)a->mem)[i] = (uint32_t)v;
		else
			((uint64_t *)a->mem)[i] = v;
	}
	Py_DECREF(seq);
	a->p = a->mem;
	a->n = (size_t)n;
	return 0;
bad:
	Py_DECREF(seq);
	carr_release(a);
	return -1;
}

/* Fills k with keys (uint64) and claims the handle (rule 1): 0 with both held, or -1 with an
 * exception set and neither held. */
static int keys_claimed(ReaderObject *self, PyObject *keys, struct carr *k)
{
	if (carr_get(keys, 8, "keys", k) < 0)
		return -1;
	if (claim(self) < 0) {
		carr_release(k);
		return -1;
	}
	return 0;
}

/* ---- Reader ---- */

static int Reader_init(ReaderObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "name", NULL };
	const char *name = NULL;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|z:Reader", kwlist, &name))
		return -1;
	if (self->rd_r) {
		PyErr_SetString(PyExc_RuntimeError, "kvidx.Reader is already open");
		return -1;
	}
	struct kvidx_reader *r;
	Py_BEGIN_ALLOW_THREADS
	r = kvidx_reader_open(name);
	Py_END_ALLOW_THREADS
	if (!r) {
		raise_open(name ? name : KVIDX_DEFAULT_NAME, errno);
		return -1;
	}
	self->rd_r = r;
	self->rd_pid = getpid();
	atomic_store(&self->rd_owner, 0);
	snprintf(self->rd_name, sizeof(self->rd_name), "%s", name ? name : KVIDX_DEFAULT_NAME);
	return 0;
}

static void Reader_dealloc(ReaderObject *self)
{
	/* Rule 4: a forked child must not release the parent's registry slot. */
	if (self->rd_r && self->rd_pid == getpid())
		kvidx_reader_close(self->rd_r);
	self->rd_r = NULL;
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Reader_close(ReaderObject *self, PyObject *unused)
{
	if (!self->rd_r || self->rd_pid != getpid()) {
		self->rd_r = NULL; /* closed already, or a child's copy: forget it (rule 4) */
		Py_RETURN_NONE;
	}
	if (claim(self) < 0)
		return NULL;
	kvidx_reader_close(self->rd_r);
	self->rd_r = NULL;
	unclaim(self);
	Py_RETURN_NONE;
}

static PyObject *Reader_enter(ReaderObject *self, PyObject *unused)
{
	Py_INCREF(self);
	return (PyObject *)self;
}

static PyObject *Reader_exit(ReaderObject *self, PyObject *args)
{
	return Reader_close(self, NULL);
}

/* The index's info, retried once (rule 3); the caller holds the claim. 0 or a negative error. */
static int info_get(ReaderObject *self, struct kvidx_info *info)
{
	int rc = kvidx_reader_info(self->rd_r, info);

	if (rc == -KVIDX_ERETRY)
		rc = kvidx_reader_info(self->rd_r, info);
	return rc;
}

/* info_get() under a claim of its own: 0, or -1 with kvidx.Error (or the claim's error) set. */
static int info_claimed(ReaderObject *self, struct kvidx_info *info)
{
	if (claim(self) < 0)
		return -1;
	int rc = info_get(self, info);
	unclaim(self);
	if (rc < 0) {
		raise_kvidx(rc);
		return -1;
	}
	return 0;
}

static PyObject *Reader_info(ReaderObject *self, PyObject *unused)
{
	struct kvidx_info in;

	if (info_claimed(self, &in) < 0)
		return NULL;
	return Py_BuildValue(
		"{s:s,s:I,s:K,s:s,s:s,s:I,s:K,s:K,s:I,s:I,s:I,s:i,s:K,s:K}", "name",
		self->rd_name, "layout_version", in.layout_version, "generation",
		(unsigned long long)in.generation, "algo", kvidx_key_algo_name(in.algo), "seed",
		in.seed, "block_size", in.block_size, "capacity",
		(unsigned long long)in.geo.capacity, "records", (unsigned long long)in.geo.records,
		"pods_per_key", in.geo.pods_per_key, "max_pods", in.geo.max_pods, "max_readers",
		in.geo.max_readers, "writer_pid",
		(int)in.writer_pid, "heartbeat_ns", (unsigned long long)in.heartbeat_ns,
		"created_ns", (unsigned long long)in.created_ns);
}

/* Pod name of index pod (retrying a torn copy once); 0, or a negative error. */
static int pod_name(ReaderObject *self, int pod, char *name, char *model)
{
	int rc = kvidx_reader_pod(self->rd_r, pod, name, model);

	if (rc == -KVIDX_ERETRY)
		rc = kvidx_reader_pod(self->rd_r, pod, name, model);
	return rc;
}

static PyObject *Reader_pods(ReaderObject *self, PyObject *unused)
{
	struct kvidx_info in;
	char name[KVIDX_POD_NAME_MAX], model[KVIDX_POD_NAME_MAX];

	if (claim(self) < 0)
		return NULL;
	int rc = info_get(self, &in);
	PyObject *list = rc < 0 ? NULL : PyList_New(0);
	for (uint32_t p = 0; list && p < in.geo.max_pods; p++) {
		if (pod_name(self, (int)p, name, model) < 0)
			continue;
		PyObject *t = PyStructSequence_New(&PodType);
		if (!t) {
			Py_CLEAR(list);
			break;
		}
		PyStructSequence_SET_ITEM(t, 0, PyLong_FromLong((long)p));
		PyStructSequence_SET_ITEM(t, 1, PyUnicode_DecodeUTF8(name, strlen(name), "replace"));
		PyStructSequence_SET_ITEM(t, 2, PyUnicode_DecodeUTF8(model, strlen(model), "replace"));
		if (PyErr_Occurred() || PyList_Append(list, t) < 0)
			Py_CLEAR(list);
		Py_DECREF(t);
	}
	unclaim(self);
	if (rc < 0)
		return raise_kvidx(rc);
	return list;
}

/* A pod given as an index (int) or a name (str) -> its index; -1 with an exception set. */
static int pod_index(ReaderObject *self, PyObject *pod)
{
	if (PyLong_Check(pod)) {
		long v = PyLong_AsLong(pod);
		if (v == -1 && PyErr_Occurred())
			return -1;
		if (v < 0 || v > INT32_MAX) {
			PyErr_Format(PyExc_ValueError, "pod index %ld out of range", v);
			return -1;
		}
		return (int)v;
	}
	if (!PyUnicode_Check(pod)) {
		PyErr_Format(PyExc_TypeError, "a pod is an index (int) or a name (str), not %.100s",
			     Py_TYPE(pod)->tp_name);
		return -1;
	}
	const char *s = PyUnicode_AsUTF8(pod);
	if (!s)
		return -1;
	int rc = kvidx_reader_pod_find(self->rd_r, s);
	if (rc < 0) {
		PyErr_Format(PyExc_KeyError, "no pod named '%s' in the index", s);
		return -1;
	}
	return rc;
}

/* load(pod): the pod's row of the load view (kvidx_pod_load()). */
static PyObject *Reader_load(ReaderObject *self, PyObject *pod)
{
	struct kvidx_load l;
	int rc;

	if (claim(self) < 0)
		return NULL;
	int p = pod_index(self, pod);
	/* -KVIDX_ERETRY: the writer changed the row on every try; it is brief, so try again a
	 * few times before giving the error to the caller. */
	for (int i = 0; p >= 0 && i < 4; i++)
		if ((rc = kvidx_pod_load(self->rd_r, p, &l)) != -KVIDX_ERETRY)
			break;
	unclaim(self);
	if (p < 0)
		return NULL;
	if (rc < 0)
		return raise_kvidx(rc);
	PyObject *t = PyStructSequence_New(&LoadType);
	if (!t)
		return NULL;
	PyStructSequence_SET_ITEM(t, 0, PyLong_FromUnsignedLong(l.inflight));
	PyStructSequence_SET_ITEM(t, 1, PyLong_FromUnsignedLongLong(l.prefill_tokens));
	PyStructSequence_SET_ITEM(t, 2, PyLong_FromUnsignedLongLong(l.updated_ns));
	PyStructSequence_SET_ITEM(t, 3, PyLong_FromUnsignedLongLong(l.lost));
	if (PyErr_Occurred())
		Py_CLEAR(t);
	return t;
}

static PyObject *Reader_pod_index(ReaderObject *self, PyObject *pod)
{
	if (claim(self) < 0)
		return NULL;
	int p = pod_index(self, pod);
	unclaim(self);
	return p < 0 ? NULL : PyLong_FromLong(p);
}

/* The multimodal items of keys(): mm, a sequence of (start, length, id). */
struct mm_conv {
	PyObject *seq;
	struct kvidx_mm_item *items;
	size_t n;
};

static int mm_get(PyObject *mm, struct mm_conv *c)
{
	memset(c, 0, sizeof(*c));
	if (!mm || mm == Py_None)
		return 0;
	c->seq = PySequence_Fast(mm, "mm must be a sequence of (start, length, id)");
	if (!c->seq)
		return -1;
	Py_ssize_t n = PySequence_Fast_GET_SIZE(c->seq);
	if (n > KVIDX_KEY_MAX_MM) {
		PyErr_Format(PyExc_ValueError, "at most %d multimodal items", KVIDX_KEY_MAX_MM);
		return -1;
	}
	c->items = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*c->items));
	if (!c->items) {
		PyErr_NoMemory();
		return -1;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *it = PySequence_Fast_GET_ITEM(c->seq, i), *id;
		unsigned long long start, len;
		/* The id's UTF-8 stays valid while c->seq holds the tuple holding the str. */
		if (!PyTuple_Check(it) || PyTuple_GET_SIZE(it) != 3 ||
		    !PyArg_ParseTuple(it, "KKU", &start, &len, &id)) {
			if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
				PyErr_Clear();
				PyErr_Format(PyExc_TypeError,
					     "mm[%zd] must be a tuple (start: int, length: int, id: str)", i);
			}
			return -1;
		}
		if (start > UINT32_MAX || len > UINT32_MAX) {
			PyErr_Format(PyExc_OverflowError, "mm[%zd]: start and length are uint32", i);
			return -1;
		}
		c->items[i].start = (uint32_t)start;
		c->items[i].len = (uint32_t)len;
		c->items[i].id = PyUnicode_AsUTF8(id);
		if (!c->items[i].id)
			return -1;
		c->n++;
	}
	return 0;
}

static void mm_release(struct mm_conv *c)
{
	PyMem_Free(c->items);
	Py_XDECREF(c->seq);
}

static PyObject *Reader_keys(ReaderObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "tokens", "model", "lora", "salt", "mm", NULL };
	PyObject *tokens, *mm = NULL, *res = NULL;
	const char *model, *lora = NULL, *salt = NULL;
	struct kvidx_info in;
	struct carr t;
	struct mm_conv mc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "Os|zzO:keys", kwlist, &tokens, &model, &lora,
					 &salt, &mm))
		return NULL;
	if (info_claimed(self, &in) < 0)
		return NULL;
	if (carr_get(tokens, 4, "tokens", &t) < 0)
		return NULL;
	if (mm_get(mm, &mc) < 0)
		goto out;
	size_t max = in.block_size ? t.n / in.block_size : 0, n;
	uint64_t *keys = PyMem_Malloc(max ? max * sizeof(uint64_t) : 1);
	if (!keys) {
		PyErr_NoMemory();
		goto out;
	}
	struct kvidx_key_extras ex = { .salt = salt, .mm = mc.items, .nmm = mc.n };
	int err;
	Py_BEGIN_ALLOW_THREADS
	uint64_t root = kvidx_key_root(in.algo, in.seed, lora && *lora ? lora : model);
	errno = 0;
	n = kvidx_key_chain_ex(in.algo, root, t.p, t.n, in.block_size, &ex, keys, max);
	err = n == 0 ? errno : 0;
	Py_END_ALLOW_THREADS
	if (err)
		raise_kvidx(-err);
	else
		res = PyObject_CallFunction(ArrayType, "sy#", "Q", (const char *)keys,
					    (Py_ssize_t)(n * sizeof(uint64_t)));
	PyMem_Free(keys);
out:
	mm_release(&mc);
	carr_release(&t);
	return res;
}

static int weights_get(PyObject *d, struct kvidx_weights *w)
{
	static const char *const names[] = { "gpu", "cpu", "disk", "other" };

	kvidx_weights_default(w);
	if (!d || d == Py_None)
		return 0;
	if (!PyDict_Check(d)) {
		PyErr_SetString(PyExc_TypeError, "weights must be a dict (gpu, cpu, disk, other, speculative)");
		return -1;
	}
	PyObject *k, *v;
	Py_ssize_t pos = 0;
	while (PyDict_Next(d, &pos, &k, &v)) {
		const char *s = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
		double x = PyFloat_AsDouble(v);
		if (x == -1.0 && PyErr_Occurred())
			return -1;
		double *dst = NULL;
		for (unsigned t = 0; s && t < KVIDX_NTIERS; t++)
			if (!strcmp(s, names[t]))
				dst = &w->tier[t];
		if (s && !strcmp(s, "speculative"))
			dst = &w->speculative;
		if (!dst) {
			PyErr_Format(PyExc_KeyError, "unknown weight %R", k);
			return -1;
		}
		*dst = x;
	}
	return 0;
}

static PyObject *Reader_score(ReaderObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "keys", "pods", "weights", NULL };
	PyObject *keys, *pods = Py_None, *wd = NULL, *list = NULL, *pseq = NULL;
	struct kvidx_score stack_rows[ROWS_INLINE], *rows = stack_rows;
	int stack_cand[ROWS_INLINE], *cand = NULL;
	size_t ncand = 0, max = ROWS_INLINE;
	struct kvidx_weights w;
	char name[KVIDX_POD_NAME_MAX];
	struct carr k;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO:score", kwlist, &keys, &pods, &wd))
		return NULL;
	if (weights_get(wd, &w) < 0)
		return NULL;
	if (keys_claimed(self, keys, &k) < 0)
		return NULL;
	if (PyUnicode_Check(pods) || PyBytes_Check(pods)) {
		/* A string is a sequence of characters, each an unknown name: refused. */
		PyErr_Format(PyExc_TypeError, "pods must be a list of pod names or indices, not "
			     "%.100s (write pods=[%R])", Py_TYPE(pods)->tp_name, pods);
		goto out;
	}
	if (pods != Py_None) {
		pseq = PySequence_Fast(pods, "pods must be a sequence of pod names or indices");
		if (!pseq)
			goto out;
		ncand = (size_t)PySequence_Fast_GET_SIZE(pseq);
		cand = stack_cand;
		if (ncand > ROWS_INLINE) {
			cand = PyMem_Malloc(ncand * sizeof(*cand));
			rows = PyMem_Malloc(ncand * sizeof(*rows));
			max = ncand;
			if (!cand || !rows) {
				PyErr_NoMemory();
				goto out;
			}
		}
		for (size_t i = 0; i < ncand; i++) {
			PyObject *p = PySequence_Fast_GET_ITEM(pseq, (Py_ssize_t)i);
			/* A name unknown to the index scores as no pod (-1 is skipped). */
			if (PyUnicode_Check(p)) {
				const char *s = PyUnicode_AsUTF8(p);
				if (!s)
					goto out;
				cand[i] = kvidx_reader_pod_find(self->rd_r, s);
			} else if ((cand[i] = pod_index(self, p)) < 0) {
				goto out;
			}
		}
	}
	Py_BEGIN_ALLOW_THREADS
	rc = kvidx_score(self->rd_r, k.p, k.n, cand, ncand, &w, rows, max);
	if (rc == -KVIDX_ERETRY)
		rc = kvidx_score(self->rd_r, k.p, k.n, cand, ncand, &w, rows, max);
	Py_END_ALLOW_THREADS
	if (rc < 0) {
		raise_kvidx(rc);
		goto out;
	}
	list = PyList_New(rc);
	for (int i = 0; list && i < rc; i++) {
		const struct kvidx_score *s = &rows[i];
		PyObject *t = PyStructSequence_New(&ScoreType), *nm;
		if (!t) {
			Py_CLEAR(list);
			break;
		}
		if (pod_name(self, s->pod, name, NULL) < 0)
			nm = Py_None, Py_INCREF(nm); /* removed since it was scored */
		else
			nm = PyUnicode_DecodeUTF8(name, strlen(name), "replace");
		PyStructSequence_SET_ITEM(t, 0, nm);
		PyStructSequence_SET_ITEM(t, 1, PyLong_FromLong(s->pod));
		PyStructSequence_SET_ITEM(t, 2, PyLong_FromUnsignedLong(s->blocks));
		PyStructSequence_SET_ITEM(t, 3, PyLong_FromUnsignedLong(s->spec_blocks));
		PyStructSequence_SET_ITEM(t, 4, PyLong_FromUnsignedLong(s->run[0]));
		PyStructSequence_SET_ITEM(t, 5, PyLong_FromUnsignedLong(s->run[1]));
		PyStructSequence_SET_ITEM(t, 6, PyLong_FromUnsignedLong(s->run[2]));
		PyStructSequence_SET_ITEM(t, 7, PyLong_FromUnsignedLong(s->run[3]));
		PyStructSequence_SET_ITEM(t, 8, PyLong_FromUnsignedLong(s->spec_run));
		PyStructSequence_SET_ITEM(t, 9, PyFloat_FromDouble(s->score));
		/* By name only (not in the tuple, so 1.0 unpacking stays valid): the hybrid hit. */
		PyStructSequence_SET_ITEM(t, 10, PyLong_FromUnsignedLong(s->hit));
		PyList_SET_ITEM(list, i, t);
		if (PyErr_Occurred())
			Py_CLEAR(list);
	}
out:
	unclaim(self);
	Py_XDECREF(pseq);
	if (cand != stack_cand)
		PyMem_Free(cand);
	if (rows != stack_rows)
		PyMem_Free(rows);
	carr_release(&k);
	return list;
}

/* commit/report_outcome: True when queued, False when dropped because the ring was full. */
static PyObject *ring_result(int rc)
{
	if (rc == -EAGAIN)
		Py_RETURN_FALSE;
	if (rc < 0)
		return raise_kvidx(rc);
	Py_RETURN_TRUE;
}

static PyObject *Reader_commit(ReaderObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "keys", "pod", "corr_id", "prefill_pod", "matched_blocks",
				  "matched_spec", "prompt_tokens", NULL };
	PyObject *keys, *pod, *prefill = Py_None;
	uint64_t corr = 0;
	uint32_t matched = 0, mspec = 0, prompt = 0;
	struct carr k;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O&OO&O&O&:commit", kwlist, &keys, &pod,
					 corr_conv, &corr, &prefill, u32_conv, &matched,
					 u32_conv, &mspec, u32_conv, &prompt))
		return NULL;
	if (keys_claimed(self, keys, &k) < 0)
		return NULL;
	PyObject *res = NULL;
	int p = pod_index(self, pod), pp = -1;
	if (p >= 0 && prefill != Py_None)
		pp = pod_index(self, prefill);
	if (p >= 0 && (prefill == Py_None || pp >= 0)) {
		struct kvidx_route rt = { .corr_id = corr, .pod = p, .prefill_pod = pp,
					  .keys = k.p, .nkeys = k.n, .matched_blocks = matched,
					  .matched_spec = mspec, .prompt_tokens = prompt };
		res = ring_result(kvidx_commit(self->rd_r, &rt));
	}
	unclaim(self);
	carr_release(&k);
	return res;
}

static PyObject *Reader_report_outcome(ReaderObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "corr_id", "pod", "cached_tokens", "prompt_tokens", NULL };
	uint64_t corr;
	uint32_t cached, prompt;
	PyObject *pod, *res = NULL;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&OO&O&:report_outcome", kwlist, corr_conv,
					 &corr, &pod, u32_conv, &cached, u32_conv, &prompt))
		return NULL;
	if (claim(self) < 0)
		return NULL;
	int p = pod_index(self, pod);
	if (p >= 0)
		res = ring_result(kvidx_report_outcome(self->rd_r, corr, p, cached, prompt));
	unclaim(self);
	return res;
}

static PyObject *Reader_get_closed(ReaderObject *self, void *unused)
{
	return PyBool_FromLong(self->rd_r == NULL);
}

static PyMethodDef Reader_methods[] = {
	{ "info", (PyCFunction)Reader_info, METH_NOARGS,
	  "info($self, /)\n--\n\ninfo() -> dict: the index header (key scheme: algo, seed, block_size; geometry; "
	  "writer pid and heartbeat)." },
	{ "pods", (PyCFunction)Reader_pods, METH_NOARGS,
	  "pods($self, /)\n--\n\npods() -> list of Pod(index, name, model): the pods in use." },
	{ "pod_index", (PyCFunction)Reader_pod_index, METH_O,
	  "pod_index($self, pod, /)\n--\n\npod_index(name) -> int: a pod's index (KeyError if unknown). Linear in max_pods." },
	{ "keys", (PyCFunction)(void (*)(void))Reader_keys, METH_VARARGS | METH_KEYWORDS,
	  "keys($self, /, tokens, model, lora=None, salt=None, mm=())\n--\n\nkeys(...) -> array('Q'): the prompt's block "
	  "keys in the index's own scheme. tokens: a buffer of uint32 (array('I'), numpy) or a "
	  "sequence of ints; lora: the adapter name (its root replaces the model's); salt: vLLM's "
	  "cache_salt; mm: (start, length, id) multimodal items." },
	{ "score", (PyCFunction)(void (*)(void))Reader_score, METH_VARARGS | METH_KEYWORDS,
	  "score($self, /, keys, pods=None, weights=None)\n--\n\nscore(...) -> list of Score, by pod index. keys: a buffer "
	  "of uint64 or a sequence of ints; pods: candidate names or indices (each gets a row, "
	  "unknown names are skipped), None for every pod holding block 0; weights: dict of "
	  "gpu, cpu, disk, other, speculative. Releases the GIL." },
	{ "commit", (PyCFunction)(void (*)(void))Reader_commit, METH_VARARGS | METH_KEYWORDS,
	  "commit($self, /, keys, pod, corr_id=0, prefill_pod=None, matched_blocks=0, "
	  "matched_spec=0, prompt_tokens=0)\n--\n\ncommit(...) -> bool: sends a routing decision to the writer (predictions for "
	  "keys on pod, the request counted in its load view; prompt_tokens 0: len(keys) x "
	  "block size). corr_id: an int in [0, 2**64) or the request id (str, hashed as "
	  "corr_id() does); report the outcome on this Reader. False when this reader's ring "
	  "was full (dropped and counted)." },
	{ "load", (PyCFunction)Reader_load, METH_O,
	  "load($self, pod, /)\n--\n\nload(pod) -> Load(inflight, prefill_tokens, updated_ns, lost): the pod's row of the load "
	  "view, every router's requests in flight there and their uncached prompt tokens "
	  "(kvidx_pod_load()). pod: index or name. Wait-free." },
	{ "report_outcome", (PyCFunction)(void (*)(void))Reader_report_outcome,
	  METH_VARARGS | METH_KEYWORDS,
	  "report_outcome($self, /, corr_id, pod, cached_tokens, prompt_tokens)\n--\n\n"
	  "report_outcome(...) -> bool: what the model "
	  "server said about a routed request. False when the ring was full." },
	{ "close", (PyCFunction)Reader_close, METH_NOARGS, "close($self, /)\n--\n\nDetaches from the index." },
	{ "__enter__", (PyCFunction)Reader_enter, METH_NOARGS, NULL },
	{ "__exit__", (PyCFunction)Reader_exit, METH_VARARGS, NULL },
	{ NULL }
};

static PyGetSetDef Reader_getset[] = {
	{ "closed", (getter)Reader_get_closed, NULL, "whether close() was called", NULL },
	{ NULL }
};

static PyTypeObject ReaderType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvidx.Reader",
	.tp_basicsize = sizeof(ReaderObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Reader(name=None)\n--\n\nA router's handle on index name (default \"kvidx\").\n"
		  "One thread at a time (ConcurrentUseError otherwise); one process (open it\n"
		  "after fork). Errors raise kvidx.Error(code, message).",
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)Reader_init,
	.tp_dealloc = (destructor)Reader_dealloc,
	.tp_methods = Reader_methods,
	.tp_getset = Reader_getset,
};

static PyStructSequence_Field pod_fields[] = {
	{ "index", "pod index" }, { "name", "pod name (ip:port)" }, { "model", "model or \"\"" },
	{ NULL }
};
static PyStructSequence_Desc pod_desc = { "kvidx.Pod", "A pod of the index.", pod_fields, 3 };

static PyStructSequence_Field load_fields[] = {
	{ "inflight", "requests routed to the pod whose outcome has not come" },
	{ "prefill_tokens", "uncached prompt tokens of those requests" },
	{ "updated_ns", "kvidx_now_ns() of the writer's last change to the row" },
	{ "lost", "requests retired without their outcome (time bound, full map)" },
	{ NULL }
};
static PyStructSequence_Desc load_desc = { "kvidx.Load", "One pod's row of the load view.",
					   load_fields, 4 };

static PyStructSequence_Field score_fields[] = {
	{ "pod", "pod name (None if removed since)" },
	{ "index", "pod index" },
	{ "blocks", "consecutive blocks from block 0 the pod holds" },
	{ "spec_blocks", "of those, held only speculatively" },
	{ "gpu_run", "run from block 0 held confirmed on the GPU" },
	{ "cpu_run", "run from block 0 held confirmed on the CPU" },
	{ "disk_run", "run from block 0 held confirmed on disk" },
	{ "other_run", "run from block 0 held confirmed on another medium" },
	{ "spec_run", "run from block 0 held speculatively" },
	{ "score", "sum of per-block tier weights" },
	{ "hit", "the hybrid hit in blocks, vLLM's rule over the pod's KV-cache groups (blocks on a "
		 "one-group model); by name only" },
	{ NULL }
};
static PyStructSequence_Desc score_desc = { "kvidx.Score", "One pod's prefix-scoring result.",
					    score_fields, 10 };

static PyObject *mod_strerror(PyObject *m, PyObject *arg)
{
	long code = PyLong_AsLong(arg);
	if (code == -1 && PyErr_Occurred())
		return NULL;
	return PyUnicode_FromString(kvidx_strerror((int)(code > 0 ? -code : code)));
}

static PyObject *mod_corr_id(PyObject *m, PyObject *arg)
{
	uint64_t v;

	(void)m;
	if (!PyUnicode_Check(arg) && !PyBytes_Check(arg)) {
		PyErr_Format(PyExc_TypeError, "corr_id() takes a request id (str or bytes), not "
			     "%.100s", Py_TYPE(arg)->tp_name);
		return NULL;
	}
	if (!corr_conv(arg, &v))
		return NULL;
	return PyLong_FromUnsignedLongLong(v);
}

static PyMethodDef mod_methods[] = {
	{ "strerror", mod_strerror, METH_O,
	  "strerror($module, code, /)\n--\n\nkvidx_strerror(): the message of a code." },
	{ "corr_id", mod_corr_id, METH_O,
	  "corr_id($module, request_id, /)\n--\n\nThe correlation id (int) of a request id "
	  "(str or bytes): kvidx_corr_id(), FNV-1a-64 of its UTF-8 bytes. commit() and "
	  "report_outcome() take the string itself too." },
	{ NULL }
};

static struct PyModuleDef kvidx_module = {
	PyModuleDef_HEAD_INIT, "kvidx",
	"kvidx: the reader API of a shared-memory prefix-cache index for LLM routers.", -1,
	mod_methods,
};

PyMODINIT_FUNC PyInit_kvidx(void)
{
	PyObject *m = NULL, *arr = NULL;

	if (PyType_Ready(&ReaderType) < 0)
		return NULL;
	if (!PodType.tp_name && PyStructSequence_InitType2(&PodType, &pod_desc) < 0)
		return NULL;
	if (!ScoreType.tp_name && PyStructSequence_InitType2(&ScoreType, &score_desc) < 0)
		return NULL;
	if (!LoadType.tp_name && PyStructSequence_InitType2(&LoadType, &load_desc) < 0)
		return NULL;
	arr = PyImport_ImportModule("array");
	if (!arr)
		return NULL;
	ArrayType = PyObject_GetAttrString(arr, "array");
	Py_DECREF(arr);
	if (!ArrayType)
		return NULL;
	m = PyModule_Create(&kvidx_module);
	if (!m)
		return NULL;
	KvidxError = PyErr_NewExceptionWithDoc(
		"kvidx.Error", "A kvidx call failed: args are (code, message), code a positive "
			       "errno or KVIDX_E* value (also in .errno and .strerror).",
		PyExc_OSError, NULL);
	ConcurrentUseError = PyErr_NewExceptionWithDoc(
		"kvidx.ConcurrentUseError", "A Reader was used from two threads at once.",
		PyExc_RuntimeError, NULL);
	if (!KvidxError || !ConcurrentUseError)
		goto fail;
	Py_INCREF(&ReaderType);
	Py_INCREF(&PodType);
	Py_INCREF(&ScoreType);
	Py_INCREF(&LoadType);
	if (PyModule_AddObject(m, "Reader", (PyObject *)&ReaderType) < 0 ||
	    PyModule_AddObject(m, "Pod", (PyObject *)&PodType) < 0 ||
	    PyModule_AddObject(m, "Score", (PyObject *)&ScoreType) < 0 ||
	    PyModule_AddObject(m, "Load", (PyObject *)&LoadType) < 0 ||
	    PyModule_AddObjectRef(m, "Error", KvidxError) < 0 ||
	    PyModule_AddObjectRef(m, "ConcurrentUseError", ConcurrentUseError) < 0 ||
	    PyModule_AddStringConstant(m, "__version__", "1.0.0") < 0 ||
	    PyModule_AddStringConstant(m, "DEFAULT_NAME", KVIDX_DEFAULT_NAME) < 0 ||
	    PyModule_AddIntConstant(m, "MAX_COMMIT_KEYS", KVIDX_MAX_COMMIT_KEYS) < 0 ||
	    PyModule_AddIntConstant(m, "EVERSION", KVIDX_EVERSION) < 0 ||
	    PyModule_AddIntConstant(m, "ECORRUPT", KVIDX_ECORRUPT) < 0 ||
	    PyModule_AddIntConstant(m, "ERETRY", KVIDX_ERETRY) < 0 ||
	    PyModule_AddIntConstant(m, "ENOSLOT", KVIDX_ENOSLOT) < 0 ||
	    PyModule_AddIntConstant(m, "ENOPOD", KVIDX_ENOPOD) < 0)
		goto fail;
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}
