"""The machinery under ``dgvm.array``'s functions. It never imports them.

From the bottom up (a module imports only modules listed before it):

- arithmetic and records: ``axes`` (shapes, axes, broadcasting), ``dtypes`` (the
  supported dtypes and promotion), ``placement`` (where result chunks go), ``views``
  (``View``: a leaf read in another shape), ``special_values``, ``trees`` (expression
  trees and their value), ``namespace`` (``dgvm.array``, handed in by the package);
- running on the workers: ``wide_kernel``, ``fused`` (a tree in one pass),
  ``tree_op`` (``Elementwise``: a tree per chunk), ``blockwise_tasks`` (task bodies),
  ``blockwise`` (``run`` an op per chunk where it lives, ``collect`` partials);
- memory, per client session: ``clients`` (which cluster), ``recycle`` (released
  allocations kept for reuse), ``lifecycle`` (freeing unreachable arrays),
  ``allocation`` (``allocate``, ``NoElements``);
- the array: ``deferred`` (the tree record, building trees), ``small_reads``,
  ``aliases`` (views: ``Alias``, ``view_of``, ``derived``), ``core`` (``ArrayCore``:
  state, constructors, deferred bookkeeping, views' copies, life cycle, host round trip);
- over arrays, which they check with ``isinstance(x, ArrayCore)`` and make results of
  their inputs' class: ``keys`` (what an index selects), ``assign_ops`` (the ops of
  assignments), ``view_writes`` (writes through views), ``apply`` (elementwise
  operations), ``complex_parts`` (``x.real``, ``x.imag``), ``printing`` (NumPy's text from
  the elements shown), ``zero_size``
  (``empty_aware``), ``gather``, ``index_gather`` (integer-array gathers), ``mask_select``
  (boolean masks), ``whole_lines`` (chunks of whole lines for sorts), ``getitem``, ``setitem``, ``reduction_ops``, ``matrix_bodies``, ``per_matrix``;
- the ops of the category files, run on the workers: ``fill_ops``, ``fft_ops``,
  ``index_ops``, ``layout_ops``, ``mask_ops``, ``matrix_ops``, ``philox``, ``sort_keys``,
  ``sort_ops``, ``sort_splits``, ``search_ops``, ``unique_ops``.

``dgvm.array.DArray`` (``array_object``) is ``core.ArrayCore`` with its Python face.
"""
