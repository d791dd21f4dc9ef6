"""The transaction coordinator (issue 5; design and contracts: docs/transactions.md).

Runs in every coordinator process next to the group coordinator, on the same machinery
(log_runtime.py, ownership.py) over the compacted internal topic ``__transaction_state``:

    state.py      TxnState, TxnMetadata (the record value layout), TransactionRecord,
                  TxnTable.apply (the one way the table changes, at load and at run time)
    handlers.py   the pure state machine: InitProducerId, AddPartitionsToTxn,
                  AddOffsetsToTxn, EndTxn, complete, timeout tick, Describe/List, each
                  registered by its request type in HANDLERS
    markers.py    MarkerWriter: Broker.WriteTxnMarkers to partition leaders and
                  GroupCoordinator.WriteTxnOffsetMarker to group coordinators, retried
    runtime.py    TxnRuntime: one task per owned partition + one marker task per
                  completing transaction
    servicer.py   the TransactionCoordinator gRPC servicer

The group side of transactional offsets is ``services/coordinator/txn_offsets.py``.
"""
