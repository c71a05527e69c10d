"""The tracked queue's jobs: submit (idempotent), read, change, withdraw, report events."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Response, status
from sqlalchemy import select

from predictor.queue.errors import NotFoundError
from predictor.store.jobs import job_doc
from predictor.store.tables import JobRow
from serving.deps import PrincipalDep, ServiceDep
from serving.schemas.jobs import JOB_ID_PATTERN, JobCreate, JobEventCreate, JobList, JobPublic, JobUpdate

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

#: ``{job_id:path}``: an id may hold slashes (Kueue's ``namespace/name``), plain or percent-encoded.
#: Only POST takes ``.../events`` as the events route, so ``GET /v1/jobs/ns/events`` reads job ``ns/events``.
JobId = Annotated[str, Path(min_length=1, max_length=255, pattern=JOB_ID_PATTERN)]
_ERRORS = {404: {"description": "no such job (or not your team's)"},
           409: {"description": "conflicts with the job's state or an earlier submission"}}

#: OpenAPI links from a job document to what can be done with that job next (clients and stateful
#: testers follow them: submit -> report an event -> read, change or withdraw).
_ID = {"job_id": "$response.body#/job_id"}
JOB_LINKS = {
    "GetJob": {"operationId": "getJob", "parameters": _ID, "description": "read the job"},
    "ReportJobEvent": {"operationId": "postJobEvent", "parameters": _ID, "description": "report what happened to it"},
    "UpdateJob": {"operationId": "updateJob", "parameters": _ID, "description": "change it while pending"},
    "DeleteJob": {"operationId": "deleteJob", "parameters": _ID, "description": "withdraw it"},
}


def _linked(description: str) -> dict:
    return {"description": description, "links": JOB_LINKS}


@router.post("", response_model=JobPublic, status_code=status.HTTP_201_CREATED, operation_id="submitJob",
             summary="Submit a job to the tracked queue (idempotent by job_id)",
             responses={201: _linked("submitted"),
                        200: {"model": JobPublic, **_linked("already submitted with the same fields")},
                        403: {"description": "a member submitting for another team"}, **_ERRORS})
def submit_job(body: JobCreate, response: Response, service: ServiceDep, principal: PrincipalDep) -> dict:
    """Scores the job, plans its reservation, and streams the change. Submitting the same job again
    returns it with 200; the same id with different fields is a 409."""
    with service.metrics.time_decision("queue"):
        doc, created = service.queue.submit(body.model_dump(exclude_none=True), principal.as_actor())
    if not created:
        response.status_code = status.HTTP_200_OK
    return doc


@router.get("", response_model=JobList, operation_id="listJobs", summary="List tracked jobs (members: their team's)")
def list_jobs(service: ServiceDep, principal: PrincipalDep,
              status_: Annotated[Literal["pending", "running", "ended", "cancelled"] | None,
                                 Query(alias="status")] = None,
              limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> dict:
    stmt = select(JobRow).order_by(JobRow.submit_ts.desc(), JobRow.job_id).limit(limit)
    if status_ is not None:
        stmt = stmt.where(JobRow.status == status_)
    if principal.is_member:
        stmt = stmt.where(JobRow.team == principal.team)
    with service.db.session() as s:
        return {"jobs": [job_doc(r) for r in s.scalars(stmt)]}


@router.get("/{job_id:path}", response_model=JobPublic, operation_id="getJob", summary="One tracked job",
            responses={200: _linked("the job"), **_ERRORS})
def get_job(job_id: JobId, service: ServiceDep, principal: PrincipalDep) -> dict:
    with service.db.session() as s:
        row = s.get(JobRow, job_id)
        if row is None or not principal.can_see_team(row.team):
            raise NotFoundError(f"no tracked job {job_id!r}")
        return job_doc(row)


@router.patch("/{job_id:path}", response_model=JobPublic, operation_id="updateJob", summary="Change a pending job",
              responses={200: _linked("the job as changed"), **_ERRORS})
def update_job(job_id: JobId, body: JobUpdate, service: ServiceDep, principal: PrincipalDep) -> dict:
    """Fields given replace the submitted ones; the job is predicted and decided again."""
    with service.metrics.time_decision("queue"):
        return service.queue.update(job_id, body.model_dump(exclude_none=True), principal.as_actor())


@router.delete("/{job_id:path}", response_model=JobPublic, operation_id="deleteJob",
               summary="Withdraw a pending or running job", responses={200: _linked("the job, cancelled"), **_ERRORS})
def delete_job(job_id: JobId, service: ServiceDep, principal: PrincipalDep) -> dict:
    return service.queue.remove(job_id, principal.as_actor())


@router.post("/{job_id:path}/events", response_model=JobPublic, operation_id="postJobEvent",
             summary="Report what happened to a job", responses={200: _linked("the job after the event"), **_ERRORS})
def post_event(job_id: JobId, body: JobEventCreate, service: ServiceDep, principal: PrincipalDep) -> dict:
    """``started``, ``checkpointed``, ``finished``, ``failed``, ``preempted``: updates the job, the
    fair-share ledger and the history the features read, and re-plans the queue."""
    return service.queue.record_event(job_id, body.model_dump(exclude_none=True), principal.as_actor())
