package sdk

import (
	"context"
	"net/url"
	"strconv"
	"time"
)

// Error codes of invitations.
const (
	CodeInvitationInvalid = "invitation_invalid" // 404: a forged, mistyped or unknown accept token
	CodeInvitationUsed    = "invitation_used"    // 410: accepted or revoked before
)

// Invitation is a pending or decided invitation to a workspace. Its
// accept token is shown once, when it is created.
type Invitation struct {
	ID          string     `json:"id"`
	WorkspaceID string     `json:"workspace_id"`
	Email       string     `json:"email"`
	Role        string     `json:"role"`
	State       string     `json:"state"` // pending, accepted, revoked, expired
	ExpiresAt   time.Time  `json:"expires_at"`
	InvitedBy   string     `json:"invited_by"`
	AcceptedBy  *int64     `json:"accepted_by,omitempty"`
	AcceptedAt  *time.Time `json:"accepted_at,omitempty"`
	RevokedAt   *time.Time `json:"revoked_at,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
}

// InvitationCreateRequest is the body of POST .../invitations.
type InvitationCreateRequest struct {
	Email          string `json:"email"`
	Role           string `json:"role"`
	ExpiresInHours int    `json:"expires_in_hours,omitempty"`
}

// InvitationCreatedResponse carries the single-use accept token and link.
type InvitationCreatedResponse struct {
	Data      Invitation `json:"data"`
	Token     string     `json:"token"`
	AcceptURL string     `json:"accept_url"`
}

// InvitationResponse is one invitation.
type InvitationResponse struct {
	Data Invitation `json:"data"`
}

// InvitationCollectionResponse lists a workspace's invitations.
type InvitationCollectionResponse struct {
	Data []Invitation `json:"data"`
	Meta ListMeta     `json:"meta"`
}

// InvitationAcceptRequest is the body of POST /api/invitations/accept.
type InvitationAcceptRequest struct {
	Token string `json:"token"`
}

// InvitationAccepted says which workspace the caller joined.
type InvitationAccepted struct {
	WorkspaceID   string `json:"workspace_id"`
	WorkspaceName string `json:"workspace_name"`
	Role          string `json:"role"`
	UserID        int64  `json:"user_id"`
	InvitationID  string `json:"invitation_id"`
}

// InvitationAcceptedResponse is the answer of acceptWorkspaceInvitation.
type InvitationAcceptedResponse struct {
	Data InvitationAccepted `json:"data"`
}

// MemberCollectionResponse lists a workspace's members.
type MemberCollectionResponse struct {
	Data []Member `json:"data"`
	Meta ListMeta `json:"meta"`
}

// MemberUpdateRequest changes a member's workspace role.
type MemberUpdateRequest struct {
	Role string `json:"role"`
}

// CreateInvitation invites an email to a workspace.
func (c *Client) CreateInvitation(ctx context.Context, workspace string, req InvitationCreateRequest) (InvitationCreatedResponse, error) {
	var out InvitationCreatedResponse
	_, err := c.Do(ctx, "POST", "/api/workspaces/"+url.PathEscape(workspace)+"/invitations", req, &out)
	return out, err
}

// ListInvitations lists a workspace's invitations.
func (c *Client) ListInvitations(ctx context.Context, workspace string) ([]Invitation, error) {
	var out InvitationCollectionResponse
	_, err := c.Do(ctx, "GET", "/api/workspaces/"+url.PathEscape(workspace)+"/invitations", nil, &out)
	return out.Data, err
}

// RevokeInvitation revokes a pending invitation.
func (c *Client) RevokeInvitation(ctx context.Context, workspace, id string) (Invitation, error) {
	var out InvitationResponse
	_, err := c.Do(ctx, "DELETE", "/api/workspaces/"+url.PathEscape(workspace)+"/invitations/"+url.PathEscape(id), nil, &out)
	return out.Data, err
}

// AcceptInvitation joins the workspace of an accept token as the caller.
func (c *Client) AcceptInvitation(ctx context.Context, token string) (InvitationAccepted, error) {
	var out InvitationAcceptedResponse
	_, err := c.Do(ctx, "POST", "/api/invitations/accept", InvitationAcceptRequest{Token: token}, &out)
	return out.Data, err
}

// ListMembers lists a workspace's members.
func (c *Client) ListMembers(ctx context.Context, workspace string) ([]Member, error) {
	var out MemberCollectionResponse
	_, err := c.Do(ctx, "GET", "/api/workspaces/"+url.PathEscape(workspace)+"/members", nil, &out)
	return out.Data, err
}

// SetMemberRole changes a member's role.
func (c *Client) SetMemberRole(ctx context.Context, workspace string, userID int64, role string) error {
	_, err := c.Do(ctx, "PATCH", "/api/workspaces/"+url.PathEscape(workspace)+"/members/"+strconv.FormatInt(userID, 10), MemberUpdateRequest{Role: role}, nil)
	return err
}

// RemoveMember removes a member from a workspace.
func (c *Client) RemoveMember(ctx context.Context, workspace string, userID int64) error {
	_, err := c.Do(ctx, "DELETE", "/api/workspaces/"+url.PathEscape(workspace)+"/members/"+strconv.FormatInt(userID, 10), nil, nil)
	return err
}
